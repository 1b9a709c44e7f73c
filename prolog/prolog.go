// Package prolog is llmgw's three Slurm hooks, their fast path and their
// exit-code policy.
//
// The Prolog runs as root on every node of an allocation before the job
// (PrologFlags=Alloc), the TaskProlog as the job's user before each task,
// the Epilog as root after the job. This package is what the small
// llmgw-hook binary runs on every job start, so it links only the standard
// library and two leaves (agent/config, weights/catalog): when the weights
// are already on the node, the Prolog reads the node-local catalog copy,
// stats the weights, writes the job's record and exits, as fast as a shell
// hook. Anything else (weights missing, the catalog copy unreadable, a
// model it does not know) is handed to `llmgw prolog` (package prolog/full),
// which has the clients and the fetcher.
//
// Exit status policy (docs/design.md §3, docs/slurm/behaviour.md §5): a non-zero Prolog
// or Epilog drains the node, and the Prolog's failure requeues the job
// held, so both exit 0 on every llmgw failure, log it to stderr (slurmd's
// log) and record it for the job. No fault found here takes a node out of
// service: the hooks cannot tell a broken node from a wrong agent.toml,
// and a wrong agent.toml pushed to every node would drain the cluster. The
// TaskProlog is the one hook that exits non-zero, on purpose: that fails
// the job, with the reason in its output, and leaves the node in service
// (see TaskProlog).
package prolog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Job is the job a hook runs for, as slurmd describes it in the hook's
// environment.
type Job struct {
	// ID is SLURM_JOB_ID.
	ID string
	// Node is SLURMD_NODENAME.
	Node string
	// Model is the catalog model the job asked for; "" for none.
	Model string
}

// CommentTag is how a job names its model in its comment when the SPANK
// plugin is not installed: `sbatch --comment=llmgw:model=M`, possibly
// beside the user's own words. The Prolog and Epilog see SLURM_JOB_COMMENT;
// they do not see the job's environment (docs/slurm/behaviour.md §4).
const CommentTag = "llmgw:model="

// JobFromEnv reads the job from a Prolog's or Epilog's environment (getenv
// is os.Getenv in the hooks). The model comes from SPANK_LLMGW_MODEL (the
// SPANK plugin's --llmgw-model) or else from the comment tag. It does no
// I/O. A job that names no model is no error: Model is "". A model name
// that cannot be one is an error that says so; so is a missing job id when
// a model is named, since the record is kept by job id.
func JobFromEnv(getenv func(string) string) (Job, error) {
	j := Job{ID: getenv("SLURM_JOB_ID"), Node: getenv("SLURMD_NODENAME"), Model: getenv("SPANK_LLMGW_MODEL")}
	if j.Model == "" {
		j.Model = modelFromComment(getenv("SLURM_JOB_COMMENT"))
	}
	if j.Model == "" {
		return j, nil
	}
	if err := catalog.ValidModelName(j.Model); err != nil {
		return j, fmt.Errorf("job %s asks for a model: %w", j.ID, err)
	}
	if _, err := catalog.JobRecordPath("/", j.ID); err != nil {
		return j, fmt.Errorf("SLURM_JOB_ID: %w", err)
	}
	return j, nil
}

// modelFromComment finds the last llmgw:model= tag among the comment's
// words; the last, because the helper appends its tag after the user's text.
func modelFromComment(comment string) string {
	m := ""
	for _, w := range strings.FieldsFunc(comment, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == ',' || r == ';' }) {
		if v, ok := strings.CutPrefix(w, CommentTag); ok {
			m = v
		}
	}
	return m
}

// ErrNotPresent is wrapped by Present when the weights are not on this
// node as the catalog describes them.
var ErrNotPresent = errors.New("not present on this node")

// Present returns where m's weights are on this node, without fetching or
// hashing anything, or an error wrapping ErrNotPresent saying what is
// missing:
//   - a bare model id is passed through: the engine resolves it;
//   - a path is checked: a file must be a regular, non-empty file of the
//     catalog's size when it gives one; a directory must hold a weight file
//     and no file still being written (an empty or half-copied directory is
//     not weights, docs/design.md §2); sharded-index checks are the scanner's;
//   - a remote source must be a regular file at its cache path, of the
//     catalog's size when it gives one. The fetcher renames a file there
//     only after checking its size and digest, so a file there is whole.
//   - a model of several files must have each file in its set directory,
//     as a single remote source must (see presentFile); the path is
//     catalog.SetPath.
func Present(cacheDir string, m catalog.Model) (string, error) {
	if m.IsSet() {
		return presentSet(cacheDir, m)
	}
	switch catalog.KindOf(m.Source) {
	case catalog.KindModelID:
		return m.Source, nil
	case catalog.KindPath:
		return m.Source, checkPath(m.Source, m.Size)
	case catalog.KindRemote:
		p := catalog.CachePathFor(cacheDir, m.Source)
		_, err := presentFile(p, m.Size, m.WantSHA256())
		return p, err
	}
	return "", fmt.Errorf("source %q: not a path, an hf:/http(s) source or a model id", m.Source)
}

// presentFile checks a fetched file at p: regular, of size when one is
// given, and not tagged with another digest than want; it returns the
// file's size.
func presentFile(p string, size int64, want string) (int64, error) {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cache file %s: %w (%v)", p, ErrNotPresent, err)
	case !st.Mode().IsRegular():
		return 0, fmt.Errorf("cache file %s is not a regular file: %w", p, ErrNotPresent)
	case size > 0 && st.Size() != size:
		return 0, fmt.Errorf("cache file %s is %d bytes, the catalog says %d: %w", p, st.Size(), size, ErrNotPresent)
	}
	// A digest recorded on the file that is not the one the catalog
	// wants (an admin repinned, or declared another), or a file
	// written since it was hashed: the slow path fetches and verifies.
	if want != "" {
		if sum, tagged := catalog.RecordedSHA256(p); tagged && sum != want {
			return 0, fmt.Errorf("cache file %s is tagged with sha256 %q, the catalog wants %s: %w", p, sum, want, ErrNotPresent)
		}
	}
	return st.Size(), nil
}

// presentSet checks every file of the set m in its set directory: one
// stat each, no manifest read (the catalog entry says what the set needs),
// so the fast path stays a handful of system calls however many parts.
// A set missing any file is not present, and the slow path fetches what
// is missing. m.Size, when the files give none, is checked as their sum.
func presentSet(cacheDir string, m catalog.Model) (string, error) {
	dir := catalog.SetDir(cacheDir, m)
	var total int64
	sized := true
	for _, f := range m.Files {
		n, err := presentFile(catalog.SetFilePath(dir, f.Source), f.Size, f.WantSHA256())
		if err != nil {
			return "", err
		}
		total += n
		sized = sized && f.Size > 0
	}
	if !sized && m.Size > 0 && total != m.Size {
		return "", fmt.Errorf("set directory %s holds %d bytes, the catalog says %d: %w", dir, total, m.Size, ErrNotPresent)
	}
	return catalog.SetPath(cacheDir, m), nil
}

// HungError is returned by PresentWithin when the weights did not answer
// in time: a stuck FUSE or NFS mount, whose stat blocks in the kernel.
type HungError struct {
	Path  string
	After time.Duration
}

func (e *HungError) Error() string {
	return fmt.Sprintf("the weights at %s did not answer within %s s (a hung mount?)", e.Path, strconv.FormatFloat(e.After.Seconds(), 'f', -1, 64))
}

// PresentWithin is Present bounded by d. A stat on a hung mount blocks in
// the kernel and nothing can interrupt it, while slurmd kills a Prolog
// that outlives PrologEpilogTimeout and drains the node; so the check runs
// on its own goroutine and is given up on after d with a *HungError. The
// goroutine stays blocked until the mount answers, at the latest until the
// hook's process exits (FUSE and NFS waits are killable), which it does
// right after.
func PresentWithin(cacheDir string, m catalog.Model, d time.Duration) (string, error) {
	type result struct {
		path string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		p, err := Present(cacheDir, m)
		ch <- result{p, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.path, r.err
	case <-t.C:
		return "", &HungError{Path: weightsPath(cacheDir, m), After: d}
	}
}

// weightsPath is where Present looks for m's weights.
func weightsPath(cacheDir string, m catalog.Model) string {
	if m.IsSet() {
		return catalog.SetDir(cacheDir, m)
	}
	if catalog.KindOf(m.Source) == catalog.KindRemote {
		return catalog.CachePathFor(cacheDir, m.Source)
	}
	return m.Source
}

func checkPath(p string, size int64) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("path %s: %w (%v)", p, ErrNotPresent, err)
	}
	if st.Mode().IsRegular() {
		switch {
		case st.Size() == 0:
			return fmt.Errorf("path %s is empty: %w", p, ErrNotPresent)
		case size > 0 && st.Size() != size:
			return fmt.Errorf("path %s is %d bytes, the catalog says %d: %w", p, st.Size(), size, ErrNotPresent)
		}
		return nil
	}
	if !st.IsDir() {
		return fmt.Errorf("path %s is neither a file nor a directory: %w", p, ErrNotPresent)
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return fmt.Errorf("path %s: %w (%v)", p, ErrNotPresent, err)
	}
	weights := false
	for _, e := range ents {
		switch {
		case catalog.IsPartialName(e.Name()):
			return fmt.Errorf("path %s holds %s, still being written: %w", p, e.Name(), ErrNotPresent)
		case catalog.IsWeightName(e.Name()):
			weights = true
		}
	}
	if !weights {
		return fmt.Errorf("path %s holds no weight file (.gguf .safetensors .bin .pt .pth): %w", p, ErrNotPresent)
	}
	return nil
}

// Fast is the Prolog's fast path: the model is in the node-local catalog
// copy and its weights are present, so the job's record is written and
// nothing else is done (no network, no call to slurmctld). Any error means
// the fast path could not settle the job, and says why; the caller hands
// the job to the slow path, which resolves, fetches, and records failures.
func Fast(cfg nodeconf.Agent, job Job, now time.Time) error {
	cp, err := catalog.ReadCopy(cfg.CatalogCopyPath())
	if err != nil {
		return err
	}
	m, ok := cp.Lookup(job.Model)
	if !ok {
		return fmt.Errorf("model %s is not in the catalog copy %s", job.Model, cfg.CatalogCopyPath())
	}
	p, err := PresentWithin(cfg.CacheDir, m, cfg.FSTimeout())
	var hung *HungError
	if errors.As(err, &hung) {
		return catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: job.ID, Model: m.Name, Source: m.Source, Time: now.UTC(),
			Error: fmt.Sprintf("weights for model %s (source %s) could not be had on %s: %v", m.Name, m.Source, job.Node, err)})
	}
	if err != nil {
		return fmt.Errorf("model %s: %w", job.Model, err)
	}
	return catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: job.ID, Model: m.Name, Source: m.Source, Set: SetOf(m), Path: p, Time: now.UTC(), Fast: true})
}

// SetOf is the set directory's name a job record names for m, or "" for a
// model of one source.
func SetOf(m catalog.Model) string {
	if m.IsSet() {
		return catalog.SetName(m)
	}
	return ""
}

// ClearRecord removes the job's record; one that is not there is no error.
func ClearRecord(runDir, job string) error {
	p, err := catalog.JobRecordPath(runDir, job)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// GCStampFile is the stamp, in the run dir, whose modification time is
// when an Epilog last started node gc.
const GCStampFile = "gc.stamp"

// GCDue reports whether node gc is due: no Epilog has started it within
// interval. It only stats, so the Epilog's fast path can ask it on every
// job end; the claim is ClaimGC's.
func GCDue(runDir string, interval time.Duration, now time.Time) bool {
	st, err := os.Stat(filepath.Join(runDir, GCStampFile))
	return err != nil || !stampRecent(st.ModTime(), interval, now)
}
