package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/jsonlite"
)

// DefaultRunDir is the node-local runtime directory the agent's socket and
// the hooks' job records live in. It is on a tmpfs (/run): a record must not
// outlive a reboot, since no job survives one.
const DefaultRunDir = "/run/llmgw"

// JobRecord is what the Prolog leaves for the rest of a job's life on a
// node: which model the job asked for and where its weights are, or why they
// could not be had. The TaskProlog reads it (as the job's user) to tell the
// job the path or the failure; gc reads every record to leave alone the
// weights a running job uses; the Epilog removes it.
type JobRecord struct {
	Job    string `json:"job"`
	Model  string `json:"model"`
	Source string `json:"source,omitempty"`
	// Set is the set directory's name (SetName) when the model is made of
	// several files: gc keeps the whole directory while the job runs, not
	// only the file Path names.
	Set  string `json:"set,omitempty"`
	Path string `json:"path,omitempty"`
	// HFCache is the Hugging Face cache holding the snapshot Path names,
	// when the model is a Hub repository: the TaskProlog exports it as
	// HF_HUB_CACHE, and HF_HUB_OFFLINE=1 with it when HFOffline, so that
	// the engine finds the model by its repository id, offline.
	HFCache   string    `json:"hf_hub_cache,omitempty"`
	HFOffline bool      `json:"hf_hub_offline,omitempty"`
	Error     string    `json:"error,omitempty"`
	Time      time.Time `json:"time"`
	// Fast says the Prolog's fast path found the weights present: a warm
	// start, which the agent counts (issue 28).
	Fast bool `json:"fast,omitempty"`
}

// JobsDir is where job records are kept under a runtime directory.
func JobsDir(runDir string) string { return filepath.Join(runDir, "jobs") }

// JobRecordPath is the record of job under runDir. job must be a Slurm job
// id (digits, with an optional array or het suffix spelled in digits and
// '_' or '+'); anything else could name a path outside the directory.
func JobRecordPath(runDir, job string) (string, error) {
	if job == "" || len(job) > 64 {
		return "", fmt.Errorf("job id %q: want a Slurm job id such as 1234", job)
	}
	for _, c := range job {
		if !(c >= '0' && c <= '9' || c == '_' || c == '+') {
			return "", fmt.Errorf("job id %q: want a Slurm job id such as 1234", job)
		}
	}
	return filepath.Join(JobsDir(runDir), job+".json"), nil
}

// WriteJobRecord writes r atomically under runDir, readable by the job's
// user: the TaskProlog runs as that user and holds no privilege. So the
// source is recorded through RedactQuery, as in the world-readable catalog
// copy: a signed URL's signature stays out, and gc still finds the cache
// file by it.
func WriteJobRecord(runDir string, r JobRecord) error {
	p, err := JobRecordPath(runDir, r.Job)
	if err != nil {
		return err
	}
	if red := RedactQuery(r.Source); red != r.Source {
		// A failed fetch's error may quote the URL it asked for.
		if i := strings.IndexByte(r.Source, '?'); i >= 0 && len(r.Source) > i+1 {
			r.Error = strings.ReplaceAll(r.Error, r.Source[i+1:], red[strings.IndexByte(red, '?')+1:])
		}
		r.Source = red
	}
	b, err := marshalJobRecord(r)
	if err != nil {
		return err
	}
	return writeReplace(p, append(b, '\n'), 0o644)
}

// marshalJobRecord is json.Marshal(r), byte for byte (job_test.go's fuzz
// test holds them equal), without its reflection: the hook's fast path
// writes a record on every job start, and json.Marshal's first use costs
// about 100 µs there.
func marshalJobRecord(r JobRecord) ([]byte, error) {
	t, err := r.Time.MarshalJSON()
	if err != nil {
		// A year outside 0..9999: json.Marshal's error says so as it always did.
		return json.Marshal(r)
	}
	b := make([]byte, 0, 160+len(r.Job)+len(r.Model)+len(r.Source)+len(r.Set)+len(r.Path)+len(r.HFCache)+len(r.Error))
	b = append(b, `{"job":`...)
	b = jsonlite.AppendString(b, r.Job)
	b = append(b, `,"model":`...)
	b = jsonlite.AppendString(b, r.Model)
	for _, f := range [...]struct{ name, v string }{{`,"source":`, r.Source}, {`,"set":`, r.Set}, {`,"path":`, r.Path}, {`,"hf_hub_cache":`, r.HFCache}} {
		if f.v != "" {
			b = append(b, f.name...)
			b = jsonlite.AppendString(b, f.v)
		}
	}
	if r.HFOffline {
		b = append(b, `,"hf_hub_offline":true`...)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = jsonlite.AppendString(b, r.Error)
	}
	b = append(b, `,"time":`...)
	b = append(b, t...)
	if r.Fast {
		b = append(b, `,"fast":true`...)
	}
	return append(b, '}'), nil
}

// writeReplace writes data to path so that a reader sees the old file or
// the new one, never a torn one (a temporary file renamed over it), but
// unlike WriteAtomic does not fsync: it is for the job records, which live
// in the run dir, a tmpfs (/run/llmgw), and must not outlive a reboot
// anyway (no job survives one). There an fsync makes nothing durable and
// costs the Prolog's fast path system calls on every job start. A run dir
// put on a disk against the advice loses nothing either: after a crash a
// record may be missing or empty, and every record then is stale.
func writeReplace(path string, data []byte, perm os.FileMode) error {
	return replace(path, data, perm, false)
}

// ReadJobRecord reads the record of job under runDir; the error wraps
// os.ErrNotExist when the Prolog left none.
func ReadJobRecord(runDir, job string) (JobRecord, error) {
	var r JobRecord
	p, err := JobRecordPath(runDir, job)
	if err != nil {
		return r, err
	}
	// The TaskProlog's fast path reads it: outside Go's poller (OpenRegular).
	b, err := ReadRegular(p)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("job record %s: %w", p, err)
	}
	return r, nil
}

// ReadJobRecords reads every job record under runDir. A record that cannot
// be read is skipped and named in the error, which is returned beside the
// records that could: gc must know that it does not know everything.
func ReadJobRecords(runDir string) ([]JobRecord, error) {
	ents, err := os.ReadDir(JobsDir(runDir))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []JobRecord
	var bad error
	for _, e := range ents {
		name := e.Name()
		if filepath.Ext(name) != ".json" {
			continue
		}
		r, err := ReadJobRecord(runDir, name[:len(name)-len(".json")])
		if err != nil {
			bad = fmt.Errorf("job records: %w", err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}
