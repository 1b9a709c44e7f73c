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
	"sync"
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
//   - a Hub model must have every file of its list in its commit's
//     snapshot in the Hugging Face cache hfCache, of its size, and its
//     refs naming the commit (see presentHub); the path is the snapshot.
func Present(cacheDir, hfCache string, m catalog.Model) (string, error) {
	return present(cacheDir, hfCache, m, nil)
}

// present is Present, each filesystem operation announced to w (nil: not
// watched).
func present(cacheDir, hfCache string, m catalog.Model, w *watch) (string, error) {
	if m.IsHub() {
		return presentHub(hfCache, *m.Hub, w)
	}
	if m.IsSet() {
		return presentSet(cacheDir, m, w)
	}
	switch catalog.KindOf(m.Source) {
	case catalog.KindModelID:
		return m.Source, nil
	case catalog.KindPath:
		return m.Source, checkPath(m.Source, m.Size, w)
	case catalog.KindRemote:
		p := catalog.CachePathFor(cacheDir, m.Source)
		_, err := presentFile(p, m.Size, m.WantSHA256(), w)
		return p, err
	}
	return "", fmt.Errorf("source %q: not a path, an hf:/http(s) source or a model id", m.Source)
}

// presentFile checks a fetched file at p: regular, of size when one is
// given, and, when want is set, tagged with want (or on a filesystem that
// keeps no tags); it returns the file's size.
func presentFile(p string, size int64, want string, w *watch) (int64, error) {
	w.begin("stat", p)
	st, err := os.Stat(p)
	w.end()
	switch {
	case err != nil:
		return 0, fmt.Errorf("cache file %s: %w (%v)", p, ErrNotPresent, err)
	case !st.Mode().IsRegular():
		return 0, fmt.Errorf("cache file %s is not a regular file: %w", p, ErrNotPresent)
	case size > 0 && st.Size() != size:
		return 0, fmt.Errorf("cache file %s is %d bytes, the catalog says %d: %w", p, st.Size(), size, ErrNotPresent)
	}
	// A digest recorded on the file that is not the one the catalog
	// wants (an admin repinned, or declared another), a file written
	// since it was hashed, or one with no digest recorded where the
	// filesystem keeps them (copied in by hand: nothing says it is the
	// pinned bytes): the slow path fetches or hashes, and verifies.
	if want != "" {
		w.begin("read the digest tag of", p)
		sum, tagged := catalog.RecordedSHA256(p)
		untagged := !tagged && catalog.Untagged(p)
		w.end()
		switch {
		case tagged && sum != want:
			return 0, fmt.Errorf("cache file %s is tagged with sha256 %q, the catalog wants %s: %w", p, sum, want, ErrNotPresent)
		case untagged:
			return 0, fmt.Errorf("cache file %s carries no recorded sha256, and the catalog pins %s: %w", p, want, ErrNotPresent)
		}
	}
	return st.Size(), nil
}

// presentSet checks every file of the set m in its set directory: one
// stat each, no manifest read (the catalog entry says what the set needs),
// so the fast path stays a handful of system calls however many parts.
// A set missing any file is not present, and the slow path fetches what
// is missing. m.Size, when the files give none, is checked as their sum.
func presentSet(cacheDir string, m catalog.Model, w *watch) (string, error) {
	dir := catalog.SetDir(cacheDir, m)
	var total int64
	sized := true
	for _, f := range m.Files {
		n, err := presentFile(catalog.SetFilePath(dir, f.Source), f.Size, f.WantSHA256(), w)
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

// presentHub checks the Hub model h in the Hugging Face cache hfCache:
// each file of its list, through the snapshot's link, a regular file of
// its size (one stat each, whoever put it there), and each ref the fetch
// writes naming the commit, since that is what an engine given the bare
// repository id reads. A ref naming another commit (a repin, another
// download into a shared cache) sends the job to the slow path, which
// points it back. Each stat and ref read is one operation announced to
// w: a Hugging Face cache on a filer that stops answering is bounded by
// hook_fs_timeout like any other weights.
func presentHub(hfCache string, h catalog.Hub, w *watch) (string, error) {
	for _, f := range h.Files {
		p := catalog.HubFilePath(hfCache, h.Repo, h.Commit, f.Path)
		w.begin("stat", p)
		st, err := os.Stat(p)
		w.end()
		switch {
		case err != nil:
			return "", fmt.Errorf("%s of %s at %s: %w (%v)", f.Path, h.Repo, h.Commit, ErrNotPresent, err)
		case !st.Mode().IsRegular() || st.Size() != f.Size:
			return "", fmt.Errorf("%s of %s at %s is not a file of %d bytes: %w", f.Path, h.Repo, h.Commit, f.Size, ErrNotPresent)
		}
	}
	for _, ref := range catalog.HubRefs(h) {
		p := catalog.HubRefPath(hfCache, h.Repo, ref)
		w.begin("read", p)
		got, err := catalog.ReadHubRef(p)
		w.end()
		if err != nil || got != h.Commit {
			return "", fmt.Errorf("%s does not name commit %s, so an engine given %s would not find it: %w", p, h.Commit, h.Repo, ErrNotPresent)
		}
	}
	return catalog.HubPath(hfCache, h), nil
}

// HungError is returned by PresentWithin when one filesystem operation on
// the weights got no answer within hook_fs_timeout: a stuck FUSE or NFS
// mount, whose stat blocks in the kernel. A filer that answers each
// operation, however slowly, is slow, not hung (SlowError).
type HungError struct {
	Path  string
	Op    string // what was asked: "stat", "list", ...
	After time.Duration
	// Answered is how many operations on the weights had answered before.
	Answered int
}

func (e *HungError) Error() string {
	op := e.Op
	if op == "" {
		op = "stat"
	}
	return fmt.Sprintf("no answer to a %s of %s within hook_fs_timeout (%s s; %d earlier operations answered): the filesystem is not answering (a hung mount?)",
		op, e.Path, strconv.FormatFloat(e.After.Seconds(), 'f', -1, 64), e.Answered)
}

// SlowError is returned by PresentWithin when every operation on the
// weights answered within hook_fs_timeout, but the whole look outlasted the
// hook's budget (the Prolog's fetch_deadline).
type SlowError struct {
	Path     string
	Budget   time.Duration
	Answered int
	Slowest  time.Duration
}

func (e *SlowError) Error() string {
	return fmt.Sprintf("the weights at %s answer, but slowly: %d operations in the %s the Prolog may take (fetch_deadline), the slowest %s s; a slow filer, not a hung one",
		e.Path, e.Answered, e.Budget, strconv.FormatFloat(e.Slowest.Seconds(), 'f', 1, 64))
}

// watch is what PresentWithin knows of the look under way: the operation
// outstanding, since when, and how many answered.
type watch struct {
	mu       sync.Mutex
	op, path string
	since    time.Time // zero: none outstanding
	answered int
	slowest  time.Duration
	where    string // the weights being looked at, for a SlowError
}

// at says the look now is at the weights where (a Hugging Face cache's
// snapshot, when several are looked in).
func (w *watch) at(where string) {
	w.mu.Lock()
	w.where = where
	w.mu.Unlock()
}

func (w *watch) begin(op, path string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.op, w.path, w.since = op, path, time.Now()
	w.mu.Unlock()
}

func (w *watch) end() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if d := time.Since(w.since); d > w.slowest {
		w.slowest = d
	}
	w.answered++
	w.since = time.Time{}
	w.mu.Unlock()
}

// PresentWithin is Present with each filesystem operation bounded by op
// (hook_fs_timeout) and the whole look by budget (the Prolog's deadline).
// A stat on a hung mount blocks in the kernel and nothing can interrupt
// it, while slurmd kills a Prolog that outlives PrologEpilogTimeout and
// drains the node; so the check runs on its own goroutine, and is given up
// on with a *HungError when one operation has had no answer for op, or
// with a *SlowError when the operations answer but the look outlasts
// budget. Bounding the whole look by one number failed jobs on a filer
// that answered each stat in 4 s as if it were hung. The goroutine stays
// blocked until the mount answers, at the latest until the hook's process
// exits (FUSE and NFS waits are killable), which it does right after.
func PresentWithin(cacheDir, hfCache string, m catalog.Model, op, budget time.Duration) (string, error) {
	p, _, err := lookWithin(op, budget, func(w *watch) (string, string, error) {
		w.at(weightsPath(cacheDir, hfCache, m))
		p, err := present(cacheDir, hfCache, m, w)
		return p, "", err
	})
	return p, err
}

// lookWithin runs look on its own goroutine, handing it the watch its
// filesystem operations announce themselves to, and gives up on it as
// PresentWithin says: a *HungError when one operation has had no answer
// for op, a *SlowError when the look outlasts budget. look's second result
// is what it found besides the path (the Hugging Face cache, for
// PresentOnNode).
func lookWithin(op, budget time.Duration, look func(*watch) (string, string, error)) (string, string, error) {
	type result struct {
		path, found string
		err         error
	}
	ch := make(chan result, 1)
	w := &watch{}
	start := time.Now()
	go func() {
		p, found, err := look(w)
		ch <- result{p, found, err}
	}()
	tick := time.NewTicker(max(min(op/20, 100*time.Millisecond), time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case r := <-ch:
			return r.path, r.found, r.err
		case now := <-tick.C:
			w.mu.Lock()
			hung := !w.since.IsZero() && now.Sub(w.since) >= op
			h := &HungError{Path: w.path, Op: w.op, After: op, Answered: w.answered}
			slow := budget > 0 && now.Sub(start) >= budget
			sl := &SlowError{Path: w.where, Budget: budget, Answered: w.answered, Slowest: max(w.slowest, now.Sub(w.since))}
			w.mu.Unlock()
			switch {
			case hung:
				return "", "", h
			case slow:
				return "", "", sl
			}
		}
	}
}

// weightsPath is where Present looks for m's weights.
func weightsPath(cacheDir, hfCache string, m catalog.Model) string {
	if m.IsHub() {
		return catalog.HubSnapshotDir(hfCache, m.Hub.Repo, m.Hub.Commit)
	}
	if m.IsSet() {
		return catalog.SetDir(cacheDir, m)
	}
	if catalog.KindOf(m.Source) == catalog.KindRemote {
		return catalog.CachePathFor(cacheDir, m.Source)
	}
	return m.Source
}

func checkPath(p string, size int64, w *watch) error {
	w.begin("stat", p)
	st, err := os.Stat(p)
	w.end()
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
	w.begin("list", p)
	ents, err := os.ReadDir(p)
	w.end()
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
	p, hf, err := PresentOnNode(cfg, m, cfg.FetchDeadline)
	var hung *HungError
	var slow *SlowError
	if errors.As(err, &hung) || errors.As(err, &slow) {
		return catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: job.ID, Model: m.Name, Source: m.Source, Time: now.UTC(),
			Error: fmt.Sprintf("weights for model %s (source %s) could not be had on %s: %v", m.Name, m.Source, job.Node, err)})
	}
	if err != nil {
		return fmt.Errorf("model %s: %w", job.Model, err)
	}
	rec := catalog.JobRecord{Job: job.ID, Model: m.Name, Source: m.Source, Set: SetOf(m), Path: p, Time: now.UTC(), Fast: true}
	HubRecord(cfg, m, hf, &rec)
	return catalog.WriteJobRecord(cfg.RunDir, rec)
}

// PresentOnNode is PresentWithin for the node cfg configures, each
// filesystem operation within its hook_fs_timeout and the whole look
// within budget, and the Hugging Face cache a Hub model was found in (else
// ""). A Hub model is looked for in hf_cache, then in the Hugging Face
// caches its weight directories hold (HubCaches): a site's shared cache on
// a filer, listed as a weight directory, holds the model as the scan says
// it does, and the node fetches nothing (before, it fetched the model
// again into hf_cache). Only hf_cache is ever written; a snapshot
// elsewhere counts only with its refs naming the commit. One look covers
// every cache: a weight directory's cache on a filer that stopped
// answering is a hung mount like hf_cache's, and the caches share the
// budget.
func PresentOnNode(cfg nodeconf.Agent, m catalog.Model, budget time.Duration) (path, hfCache string, err error) {
	if !m.IsHub() {
		p, err := PresentWithin(cfg.CacheDir, cfg.HFCacheDir(), m, cfg.FSTimeout(), budget)
		return p, "", err
	}
	caches := HubCaches(cfg)
	return lookWithin(cfg.FSTimeout(), budget, func(w *watch) (string, string, error) {
		var first error
		for _, hf := range caches {
			w.at(weightsPath(cfg.CacheDir, hf, m))
			p, err := present(cfg.CacheDir, hf, m, w)
			if err == nil {
				return p, hf, nil
			}
			if first == nil {
				// hf_cache's: where the slow path fetches it.
				first = err
			}
		}
		return "", "", first
	})
}

// HubCaches are the Hugging Face caches a node looks for a Hub model in:
// its hf_cache, then each weight directory that is one or holds one as
// hub/ (huggingface_hub's $HF_HOME/hub), the scan finding snapshots there.
// A directory that holds no models-- folder of the repository costs a
// stat.
func HubCaches(cfg nodeconf.Agent) []string {
	out := []string{cfg.HFCacheDir()}
	seen := map[string]bool{filepath.Clean(out[0]): true}
	for _, d := range cfg.WeightDirs {
		for _, c := range []string{filepath.Clean(d), filepath.Join(d, catalog.DefaultHFDir)} {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// HubRecord adds to the record of a job of m, when m is a Hub model, the
// Hugging Face cache the TaskProlog exports as HF_HUB_CACHE (hfCache,
// where the model was found; "" for the node's hf_cache), and whether it
// exports HF_HUB_OFFLINE=1 beside it.
func HubRecord(cfg nodeconf.Agent, m catalog.Model, hfCache string, rec *catalog.JobRecord) {
	if m.IsHub() {
		if hfCache == "" {
			hfCache = cfg.HFCacheDir()
		}
		rec.HFCache, rec.HFOffline = hfCache, cfg.HubOffline()
	}
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
