package agent

// The ensures that go through the fabric's swarm as a revision (issue 25):
// a Hub model (its files at its commit, into the Hugging Face cache), a
// model of several http(s) files (into its set directory), and one hf:
// file (into the cache). One fetch per revision per node, as the Fetcher's
// (swarmState.flight), under the Fetcher's own locks on every file it
// writes, so that a hand-run `llmgw fetch` or a Prolog fetching in its own
// process waits for it rather than write the same .part.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// revSpec is a revision as this node fetches it.
type revSpec struct {
	// source, sum and size are the swarm's key: the catalog's, computed
	// from the catalog entry the request carries (catalog.RevisionDigest),
	// the same the coordinator computes from its own.
	source, sum string
	size        int64
	// target names the fetch on disk: its sidecar is target's
	// (swarmSuffix); path is what the ensure answers.
	target, path string
	files        []revFileSpec
	// claim claims the room the missing files will take, whole, before
	// the first byte, in the node's record of space (the Fetcher's
	// budget, which evicts first when it does not fit), and returns its
	// release; renew, when set, renews it (a claim of a set or a Hub
	// model lapses unrenewed).
	claim func(ctx context.Context) (func(), error)
	renew func(ctx context.Context) error
	// done runs once every file is verified and named (a Hub model's links
	// and refs).
	done func(ctx context.Context) error
}

// revFileSpec is one file of a revSpec.
type revFileSpec struct {
	name string
	want fetch.Want
	// final is where the file is written (its .part beside it) and gets
	// its name once verified; publish, when set, moves it on from there (a
	// Hub blob into the Hugging Face cache); serve is where it is read
	// from once the revision is complete.
	final   string
	publish func() error
	serve   string
	// lock takes the locks a Fetcher's fetch of the file holds, and
	// returns its .part open read-write.
	lock func(ctx context.Context) (*os.File, func(), error)
	// held is where this node holds the file verified already, or "".
	held   func(ctx context.Context) string
	origin func(client *http.Client) (*fetch.Origin, error)
}

// whyNoFabric is why a revision is fetched from its origin rather than
// through the fabric's swarm ("-": nothing to say, the node has no peer
// configuration), or "" when it goes through the swarm.
func (a *Agent) whyNoFabric(cfg Config) string {
	switch {
	case a.swarm.addr == "":
		return "-"
	case !a.swarm.serving.Load():
		return "this node's chunk server is not serving (llmgw doctor says why): fetching from the origin"
	case cfg.MungeSocket == "":
		return "no munge_socket: peers know each other by MUNGE credentials, so this node fetches from the origin; set munge_socket in agent.toml"
	case cfg.Coordinator == "":
		return "no coordinator to plan the swarm: fetching from the origin"
	}
	return ""
}

// sayNoSwarm logs, once per reason, why a source is not fetched through
// the swarm.
func (a *Agent) sayNoSwarm(source, why string) {
	if why == "-" || why == "" {
		return
	}
	a.swarm.mu.Lock()
	said := a.swarm.said[why]
	a.swarm.said[why] = true
	a.swarm.mu.Unlock()
	if !said {
		a.log.WithField("source", source).Info("not fetching through the fabric's swarm: " + why)
	}
}

// ensureHubModel makes the Hub model of req present in the node's Hugging
// Face cache: through the fabric's swarm, or from the Hub when the node is
// not set up for it.
func (a *Agent) ensureHubModel(ctx context.Context, cfg Config, f *fetch.Fetcher, req api.EnsureRequest) (string, error) {
	h := *req.Hub
	why := a.whyNoFabric(cfg)
	if why == "" && catalog.RevisionSize(catalog.HubRevision(h)) <= 0 {
		why = "-" // nothing to fetch
	}
	if why != "" {
		a.sayNoSwarm(req.Source, why)
		return f.EnsureHub(ctx, cfg.HFCacheDir(), h)
	}
	spec, err := hubSpec(f, cfg.HFCacheDir(), h)
	if err != nil {
		return "", &fetch.Error{Source: req.Source, Op: "parse", Err: err}
	}
	return a.ensureRev(ctx, cfg, f, spec)
}

// hubSpec is the Hub model h in hfCache as a revision.
func hubSpec(f *fetch.Fetcher, hfCache string, h catalog.Hub) (revSpec, error) {
	targets, err := f.HubTargets(hfCache, h)
	if err != nil {
		return revSpec{}, err
	}
	files := catalog.HubRevision(h)
	spec := revSpec{source: catalog.HubSource(h.Repo, h.Commit), sum: catalog.RevisionDigest(files), size: catalog.RevisionSize(files),
		path: catalog.HubSnapshotDir(hfCache, h.Repo, h.Commit)}
	// The sidecar beside the blobs being written, in the staging
	// directory, under a hidden name no blob has (gc passes over it).
	spec.target = filepath.Join(filepath.Dir(targets[0].Write), "."+spec.sum[:16]+".llmgw-revision")
	for _, t := range targets {
		spec.files = append(spec.files, revFileSpec{name: t.File.Path, want: t.Want(h.Commit), final: t.Write, serve: t.Blob, held: t.Held,
			publish: func() error { return fetch.PublishHub(t) },
			lock:    func(ctx context.Context) (*os.File, func(), error) { return f.LockHub(ctx, t) },
			origin:  func(c *http.Client) (*fetch.Origin, error) { return f.HubOrigin(h, t.File, c) }})
	}
	spec.renew = func(ctx context.Context) error { return f.ClaimHub(ctx, hfCache, h) }
	spec.claim = func(ctx context.Context) (func(), error) {
		if err := f.ClaimHub(ctx, hfCache, h); err != nil {
			return nil, err
		}
		return func() { f.DropHubClaim(context.WithoutCancel(ctx), hfCache, h) }, nil
	}
	// Every blob verified and in: EnsureHub finds them all there, so it
	// only links the snapshot and writes the refs, through the cache's
	// directories held open as it always does.
	spec.done = func(ctx context.Context) error {
		_, err := f.EnsureHub(ctx, hfCache, h)
		return err
	}
	return spec, nil
}

// ensureSetModel makes every file of the model of several files of req
// present in its set directory, and answers the directory: through the
// fabric's swarm when every file is pinned, else file by file from the
// origins (the Prolog pins them then).
func (a *Agent) ensureSetModel(ctx context.Context, cfg Config, f *fetch.Fetcher, req api.EnsureRequest) (string, error) {
	m := catalog.Model{Name: "set", Source: req.Files[0].Source, Files: req.Files}
	fail := func(err error) (string, error) { return "", &fetch.Error{Source: req.Source, Op: "parse", Err: err} }
	if err := catalog.CheckSet(m); err != nil {
		return fail(err)
	}
	if req.Source != m.Source || catalog.SetName(m) != req.Set {
		return fail(fmt.Errorf("set %q is not the set directory of these files (%s); the request is not the catalog's", req.Set, catalog.SetName(m)))
	}
	if err := catalog.WriteManifest(f.CacheDir, m); err != nil {
		return "", &fetch.Error{Source: req.Source, Op: "write", Err: err}
	}
	dir := filepath.Join(f.CacheDir, req.Set)
	files, pinned := catalog.SetRevision(m)
	why := a.whyNoFabric(cfg)
	if why == "" && !pinned {
		why = "a file of the model pins no sha256 or size yet, and a swarm checks every chunk against them: fetching each file from its origin; the first verified fetch pins them"
	}
	if why != "" {
		a.sayNoSwarm(req.Source, why)
		for i, file := range req.Files {
			if _, err := f.EnsureIn(ctx, req.Set, file.Source, fetch.Want{SHA256: file.WantSHA256(), Size: file.Size}); err != nil {
				return "", &fetch.Error{Source: req.Source, Op: "get", Err: fmt.Errorf("file %d of %d, %s: %w", i+1, len(req.Files), catalog.FileName(file.Source), err)}
			}
		}
		return dir, nil
	}
	spec := revSpec{source: m.Source, sum: catalog.RevisionDigest(files), size: catalog.RevisionSize(files), path: dir,
		target: filepath.Join(dir, "."+catalog.RevisionDigest(files)[:16]+".llmgw-revision"), done: func(context.Context) error { return nil }}
	var claimed []fetch.SetFile
	for _, file := range req.Files {
		want := fetch.Want{SHA256: strings.ToLower(file.WantSHA256()), Size: file.Size}
		final := catalog.SetFilePath(dir, file.Source)
		spec.files = append(spec.files, revFileSpec{name: catalog.FileName(file.Source), want: want, final: final, serve: final,
			held:   func(ctx context.Context) string { return heldAt(ctx, final, want) },
			lock:   func(ctx context.Context) (*os.File, func(), error) { return f.LockFile(ctx, final) },
			origin: func(c *http.Client) (*fetch.Origin, error) { return f.Origin(file.Source, want, c) }})
		claimed = append(claimed, fetch.SetFile{Source: file.Source, Size: file.Size})
	}
	// The set's claim, as the Fetcher makes it: it shrinks as the
	// directory fills, and lapses unrenewed or once the set is whole.
	spec.renew = func(ctx context.Context) error { return f.ClaimSet(ctx, req.Set, claimed) }
	spec.claim = func(ctx context.Context) (func(), error) { return func() {}, f.ClaimSet(ctx, req.Set, claimed) }
	return a.ensureRev(ctx, cfg, f, spec)
}

// hfSwarmable says whether req, one hf: file, goes through the swarm.
func (a *Agent) hfSwarmable(cfg Config, req api.EnsureRequest) bool {
	if !strings.HasPrefix(req.Source, "hf:") || req.SHA256 == "" || req.Size <= 0 {
		return false
	}
	why := a.whyNoFabric(cfg)
	a.sayNoSwarm(req.Source, why)
	return why == ""
}

// ensureHFFile makes one hf: file present in the cache through the swarm:
// a revision of one file, keyed as a swarm of that file is (its source, its
// pin and size), so its sidecar and chunks are those of any swarm fetch of
// it.
func (a *Agent) ensureHFFile(ctx context.Context, cfg Config, f *fetch.Fetcher, req api.EnsureRequest) (string, error) {
	target := catalog.CachePathFor(f.CacheDir, req.Source)
	want := fetch.Want{SHA256: strings.ToLower(req.SHA256), Size: req.Size}
	part := target + catalog.PartSuffix
	spec := revSpec{source: req.Source, sum: want.SHA256, size: want.Size, target: target, path: target,
		done: func(context.Context) error { return nil },
		claim: func(ctx context.Context) (func(), error) {
			if err := os.MkdirAll(f.CacheDir, 0o755); err != nil {
				return nil, err
			}
			return f.ClaimSpace(ctx, part, want.Size-min(want.Size, allocated(part)), want.Size)
		},
		files: []revFileSpec{{name: catalog.FileName(req.Source), want: want, final: target, serve: target,
			held:   func(ctx context.Context) string { return heldAt(ctx, target, want) },
			lock:   func(ctx context.Context) (*os.File, func(), error) { return f.LockFile(ctx, target) },
			origin: func(c *http.Client) (*fetch.Origin, error) { return f.Origin(req.Source, want, c) }}}}
	return a.ensureRev(ctx, cfg, f, spec)
}

// heldAt is path when the file there is want's bytes, else "".
func heldAt(ctx context.Context, path string, want fetch.Want) string {
	if fetch.CheckFile(ctx, path, want) == nil {
		return path
	}
	return ""
}

// ensureRev makes spec's files present through the fabric's swarm, one
// fetch of the revision per node, and answers spec.path.
func (a *Agent) ensureRev(ctx context.Context, cfg Config, f *fetch.Fetcher, spec revSpec) (string, error) {
	err := a.swarm.flight(ctx, swarmCallKey{spec.target, spec.sum, spec.size}, func(fctx context.Context) error {
		return a.runRev(fctx, cfg, f, spec)
	})
	if err != nil {
		var fe *fetch.Error
		if errors.As(err, &fe) {
			return "", err
		}
		return "", &fetch.Error{Source: spec.source, Op: "get", Err: err}
	}
	return spec.path, nil
}

// runRev is one node's fetch of a revision: the files it holds verified
// already are read from disk, the room for the others is claimed before
// their first byte, each is locked as the Fetcher locks it, and the swarm
// fills them.
func (a *Agent) runRev(ctx context.Context, cfg Config, f *fetch.Fetcher, spec revSpec) error {
	client, err := a.client(cfg)
	if err != nil {
		return err
	}
	st := &a.swarm
	r := &revision{size: spec.size}
	// Each file written here is open under its locks until the end; the
	// unlock closes it. A file held already is open for reading. Both are
	// closed once no chunk server answer reads through them (retire).
	var unlocks []func()
	defer r.retire(func() {
		for _, rf := range r.files {
			if rf.fh != nil && rf.done.Load() && rf.origin == nil {
				rf.fh.Close()
			}
		}
		for _, u := range unlocks {
			u()
		}
	})
	held := make([]string, len(spec.files))
	missing := 0
	for i, fs := range spec.files {
		if held[i] = fs.held(ctx); held[i] == "" {
			missing++
		}
	}
	if missing == 0 {
		if err := spec.done(ctx); err != nil {
			return err
		}
		a.holdRev(spec, held)
		return nil
	}
	release, err := spec.claim(ctx)
	if err != nil {
		return err
	}
	defer release()
	if spec.renew != nil {
		// Renewed while the fetch runs: a claim lapses unrenewed, and a
		// large model over a slow uplink takes longer than its life.
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			for sleep(rctx, claimRenew) == nil {
				if err := spec.renew(rctx); err != nil && rctx.Err() == nil {
					a.log.WithError(err).WithField("source", spec.source).Warn("swarm: renewing the model's claim of room failed")
				}
			}
		}()
	}
	if err := os.MkdirAll(filepath.Dir(spec.target), 0o755); err != nil {
		return err
	}
	// Each file to write is locked once (a blob two paths of a repository
	// share is one file: locked twice, the fetch waited for itself), and
	// in the order of the names: two fetches of revisions that share
	// blobs take their locks in one order, never each waiting for the
	// other.
	type lockedFile struct {
		spec revFileSpec
		fh   *os.File
		held string // finished by another process while this one waited
	}
	locked := map[string]*lockedFile{}
	var names []string
	for i, fs := range spec.files {
		if held[i] == "" && locked[fs.final] == nil {
			locked[fs.final] = &lockedFile{spec: fs}
			names = append(names, fs.final)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		lf := locked[name]
		fh, unlock, err := lf.spec.lock(ctx)
		if err != nil {
			return fmt.Errorf("file %s: %w", lf.spec.name, err)
		}
		if lf.held = lf.spec.held(ctx); lf.held != "" {
			unlock()
			continue
		}
		unlocks = append(unlocks, unlock)
		lf.fh = fh
	}
	first := map[string]*revFile{}
	var off int64
	for i, fs := range spec.files {
		rf := newRevFile(fs, off)
		off += fs.want.Size
		r.files = append(r.files, rf)
		lf := locked[fs.final]
		at := held[i]
		if at == "" {
			at = lf.held
		}
		if at != "" {
			fh, err := os.Open(at)
			if err != nil {
				return err
			}
			rf.fh, rf.serve = fh, at
			rf.done.Store(true)
			continue
		}
		if rf.origin, err = fs.origin(st.origin); err != nil {
			return err
		}
		rf.fh = lf.fh
		if p := first[fs.final]; p != nil {
			// The same blob at another path: its bytes land in the same
			// file, which is verified and named once.
			rf.alias = p
			continue
		}
		first[fs.final] = rf
	}
	rctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	r.ctx, r.fail = rctx, func(err error) { fail(err) }
	s := &swarm{fh: r, rev: r, coord: client, codec: munge.New(cfg.MungeSocket), node: cfg.Node, fabric: cfg.Fabric,
		source: spec.source, sum: spec.sum, size: spec.size, target: spec.target, part: spec.target + catalog.PartSuffix,
		origin: st.origin, peer: st.peer, files: &st.files, log: a.log.WithField("source", spec.source),
		onBytes:       func(from string, n int64) { a.metrics.swarmBytes.WithLabelValues(from).Add(float64(n)) },
		onPeerFailure: func(why string) { a.metrics.swarmPeerFailures.WithLabelValues(why).Inc() },
		onProgress: func(done, total int64) {
			a.onProgress(fetch.Progress{Source: spec.source, Done: done, Total: total})
		}}
	s.chunk = a.revChunk(ctx, client, cfg, s)
	err = s.run(rctx)
	if c := context.Cause(rctx); c != nil && !errors.Is(c, context.Canceled) {
		err = c
	}
	var bad *badFileError
	if errors.As(err, &bad) {
		// The digests its chunks were checked against are not to be
		// trusted: the sidecar that records them goes too.
		os.Remove(spec.target + swarmSuffix)
	}
	if err != nil {
		return err
	}
	return spec.done(ctx)
}

// claimRenew is how often a revision's fetch renews its claim of room:
// well within the ten minutes a set's or a Hub model's claim lasts.
const claimRenew = 2 * time.Minute

// allocated is the bytes the file at path occupies on its disk, 0 when
// there is none.
func allocated(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// revChunk is the chunk size the swarm of s cuts the revision in: its
// sidecar's, when a fetch of it was under way here, else the coordinator's
// (asked now: the chunks of the files this node holds already are marked
// at the start, and marked chunks can no longer take another size).
func (a *Agent) revChunk(ctx context.Context, c swarmCoord, cfg Config, s *swarm) int64 {
	if sc, ok := s.loadSidecar(); ok {
		return sc.ChunkSize
	}
	p, err := c.Swarm(ctx, api.SwarmReport{Node: cfg.Node, Source: s.source, SHA256: s.sum, Size: s.size, ChunkSize: api.DefaultChunkSize})
	if err != nil || p.ChunkSize <= 0 {
		return api.DefaultChunkSize
	}
	return p.ChunkSize
}

// holdRev serves a revision this node holds whole, its files at at, to its
// fabric.
func (a *Agent) holdRev(spec revSpec, at []string) {
	if a.swarm.addr == "" {
		return
	}
	r := &revision{size: spec.size}
	var off int64
	for i, fs := range spec.files {
		rf := newRevFile(fs, off)
		rf.serve, rf.id = at[i], statID(at[i])
		rf.done.Store(true)
		r.files = append(r.files, rf)
		off += fs.want.Size
	}
	h := &held{path: spec.target, size: spec.size, chunkSize: api.DefaultChunkSize, complete: true, source: spec.source, rev: r}
	h.refresh = func(ctx context.Context) error { return a.heldPlan(ctx, spec.sum, h) }
	a.swarm.files.putComplete(spec.sum, h)
}
