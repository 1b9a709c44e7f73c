package agent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// swarmCall is one swarm fetch shared by every ensure of its file at its
// pin on this node, like the Fetcher's own call: it runs on its own
// context, canceled when the last waiter gives up.
type swarmCall struct {
	done    chan struct{}
	cancel  context.CancelFunc
	waiters int
	err     error
}

// swarmCallKey names a swarm fetch by its cache file and its pin. Keyed by
// the file alone, a caller pinning V2 joined a fetch of V1 and was handed
// the path of V1's bytes when it ended (issue 24: a job's
// LLMGW_MODEL_PATH hashed to another pin). Keyed by the pin too, that
// caller runs a fetch of its own, which waits for the other one's lock and
// then fetches (or finds) its own bytes, or fails naming both digests.
type swarmCallKey struct {
	target string
	sha256 string
	size   int64
}

// swarmState is the agent's side of issue 18: its chunk server's address,
// the files it serves, and the swarm fetches under way.
type swarmState struct {
	addr string // "" when the node serves no peers
	// serving says the chunk server listens on addr; notServing, under
	// the Agent's mu, is why it does not while addr is set.
	serving    atomic.Bool
	notServing string
	files      holdings
	mu         sync.Mutex
	calls      map[swarmCallKey]*swarmCall
	said       map[string]bool // reasons already logged for not using the swarm
	origin     *http.Client
	peer       *http.Client
}

// whyNoSwarm is why req is fetched from its origin rather than through the
// fabric's swarm, or "" when it goes through the swarm.
func (a *Agent) whyNoSwarm(cfg Config, req api.EnsureRequest) string {
	switch {
	case catalog.KindOf(req.Source) != catalog.KindRemote:
		return "-" // not fetched at all
	case a.swarm.addr == "":
		return "-" // no peer config: today's behaviour, nothing to say
	case !a.swarm.serving.Load():
		// A member that serves nothing could take the lease and read the
		// whole file where no member can read from it.
		return "this node's chunk server is not serving (llmgw doctor says why): fetching from the origin"
	case req.Set != "":
		return "a file of a model of several is fetched from its origin (swarm fetches into set directories are not built yet)"
	case !strings.HasPrefix(req.Source, "http://") && !strings.HasPrefix(req.Source, "https://") && !strings.HasPrefix(req.Source, "hf:"):
		return "only http(s) and hf: sources are fetched through the swarm"
	case req.SHA256 == "" || req.Size <= 0:
		return "the catalog entry pins no sha256 and size, and a swarm verifies every chunk against them: fetching from the origin; pin them (llmgw models pin) to fetch once per fabric"
	case cfg.MungeSocket == "":
		return "no munge_socket: peers know each other by MUNGE credentials, so this node fetches from the origin; set munge_socket in agent.toml"
	case cfg.Coordinator == "":
		return "no coordinator to plan the swarm: fetching from the origin"
	case strings.HasPrefix(req.Source, "hf:"):
		// A pinned hf: file goes through the swarm as a revision of one
		// file (ensureHFFile), never this way: this swarm asks the origin
		// for the source as a URL.
		return "-"
	}
	return ""
}

// ensureSwarm makes an http(s) source with a pinned digest present through
// the fabric's swarm, one fetch per file and pin per node.
func (a *Agent) ensureSwarm(ctx context.Context, cfg Config, f *fetch.Fetcher, req api.EnsureRequest) (string, error) {
	target := catalog.CachePathFor(f.CacheDir, req.Source)
	want := fetch.Want{SHA256: strings.ToLower(req.SHA256), Size: req.Size}
	if pinHolds(ctx, target, want) == nil {
		a.holdComplete(req.Source, want, target)
		return target, nil
	}
	st := &a.swarm
	err := st.flight(ctx, swarmCallKey{target, want.SHA256, want.Size}, func(fctx context.Context) error {
		client, err := a.client(cfg)
		if err != nil {
			return err
		}
		return a.runSwarm(fctx, f, req.Source, target, want, func(fh *os.File) error {
			s := &swarm{fh: fh, coord: client, codec: munge.New(cfg.MungeSocket), node: cfg.Node, fabric: cfg.Fabric,
				source: req.Source, sum: want.SHA256, size: want.Size, target: target, part: target + catalog.PartSuffix,
				origin: st.origin, peer: st.peer, files: &st.files, log: a.log.WithField("source", req.Source),
				onBytes:       func(from string, n int64) { a.metrics.swarmBytes.WithLabelValues(from).Add(float64(n)) },
				onPeerFailure: func(why string) { a.metrics.swarmPeerFailures.WithLabelValues(why).Inc() },
				onProgress: func(done, total int64) {
					a.onProgress(fetch.Progress{Source: req.Source, Done: done, Total: total})
				}}
			return s.run(fctx)
		})
	})
	if err != nil {
		return "", &fetch.Error{Source: req.Source, Op: "get", Err: err}
	}
	// The call was for exactly this pin, and it ended with the file sealed
	// against it under the file's lock (runSwarm): what the Fetcher's
	// joiners check with checkWant holds here by the key.
	return target, nil
}

// flight runs start once on this node for every caller of key at a time,
// like the Fetcher's own calls: on a context of its own, canceled when the
// last waiter gives up. It returns what start returned, or the caller's
// ctx.Err() when it gave up first.
func (st *swarmState) flight(ctx context.Context, key swarmCallKey, start func(context.Context) error) error {
	st.mu.Lock()
	c := st.calls[key]
	if c == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &swarmCall{done: make(chan struct{}), cancel: cancel}
		st.calls[key] = c
		go func() {
			c.err = start(fctx)
			st.mu.Lock()
			if st.calls[key] == c {
				delete(st.calls, key)
			}
			st.mu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	st.mu.Unlock()
	leave := func() {
		st.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// The last one out cancels the fetch and forgets it, as the
			// Fetcher does: a caller that comes next starts afresh (its
			// run waits for this one's lock) instead of joining a fetch
			// that is winding down, and failing with it.
			c.cancel()
			if st.calls[key] == c {
				delete(st.calls, key)
			}
		}
		st.mu.Unlock()
	}
	select {
	case <-c.done:
		leave()
		return c.err
	case <-ctx.Done():
		leave()
		return ctx.Err()
	}
}

// pinHolds says whether the file at path is the bytes want pins: a regular
// file of want's size whose sha256 (the digest recorded on it when it was
// sealed, else computed now) is want's. Its error names both digests as
// the Fetcher's does, which the Prolog reads (catalog.OtherSHA256).
func pinHolds(ctx context.Context, path string, want fetch.Want) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if want.Size > 0 && st.Size() != want.Size {
		return fmt.Errorf("%s has %d bytes, expected %d", path, st.Size(), want.Size)
	}
	sum, err := fetch.Digest(ctx, path)
	if err != nil {
		return err
	}
	if sum != want.SHA256 {
		return fmt.Errorf("%s has sha256 %s, expected %s", path, sum, want.SHA256)
	}
	return nil
}

// runSwarm runs a swarm fetch of target under the locks a Fetcher's fetch
// of it takes (the node lock and the .part's flock), so that a `llmgw fetch`
// of the same file by another process waits for it instead of truncating the
// .part under it; and runs none when that process finished the file while
// this one waited.
func (a *Agent) runSwarm(ctx context.Context, f *fetch.Fetcher, source, target string, want fetch.Want, run func(*os.File) error) error {
	fh, release, err := f.LockFile(ctx, target)
	if err != nil {
		return err
	}
	defer release()
	if pinHolds(ctx, target, want) == nil {
		a.holdComplete(source, want, target)
		return nil
	}
	// The room it will still write, in the node's space record, as the
	// Fetcher's downloads claim theirs: so eviction and the cache's budget
	// count a swarm fetch under way, a job's evicts its shortfall first,
	// and a prefetch's (fetch.Ahead) is held to the budget below cache_low.
	part := target + catalog.PartSuffix
	var have int64
	var st syscall.Stat_t
	if syscall.Stat(part, &st) == nil {
		have = min(want.Size, st.Blocks*512)
	}
	drop, err := f.ClaimSpace(ctx, part, want.Size-have, want.Size)
	if err != nil {
		return err
	}
	defer drop()
	return run(fh)
}

// holdComplete serves a verified cache file to the fabric.
func (a *Agent) holdComplete(source string, want fetch.Want, path string) {
	if a.swarm.addr == "" {
		return
	}
	h := &held{path: path, size: want.Size, chunkSize: api.DefaultChunkSize, complete: true, source: source}
	h.refresh = func(ctx context.Context) error { return a.heldPlan(ctx, want.SHA256, h) }
	a.swarm.files.putComplete(want.SHA256, h)
}

// withdraw tells the swarm of a complete file this node dropped (gone or
// changed: holdings.sweep, the chunk server's check) that it no longer
// holds it, so that the coordinator stops offering it to the fabric, where
// it was kept as a complete member for completeRetention.
func (a *Agent) withdraw(sum string, h *held) {
	h.mu.Lock()
	r := api.SwarmReport{Source: h.source, SHA256: sum, Size: h.size, ChunkSize: h.chunkSize, Gone: true}
	path := h.path
	h.mu.Unlock()
	log := a.log.WithFields(logrus.Fields{"path": path, "sha256": sum})
	log.Warn("swarm: a file this node served to its fabric is gone or changed; no longer offered")
	cfg := a.Config()
	if r.Source == "" || cfg.Coordinator == "" {
		return
	}
	r.Node = cfg.Node
	c, err := a.client(cfg)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = c.Swarm(ctx, r)
	}
	if err != nil {
		log.WithError(err).Info("swarm: the coordinator was not told; it offers the file until it forgets this node's membership")
	}
}

// seed runs the seed asks of a report's answer: each model ensured as a
// job's Prolog would, in the background, one flight per source, for as
// long as ctx lasts and the fetch moves (seedStalled).
func (a *Agent) seed(ctx context.Context, asks []api.SeedAsk) {
	for _, s := range asks {
		a.mu.Lock()
		busy := a.seeding[s.Source]
		if !busy {
			a.seeding[s.Source] = true
		}
		a.mu.Unlock()
		if busy {
			continue
		}
		go func() {
			defer func() {
				a.mu.Lock()
				delete(a.seeding, s.Source)
				a.mu.Unlock()
			}()
			sctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go a.watchSeed(sctx, cancel, s.Source)
			_, err := a.ensure(sctx, api.EnsureRequest{Source: s.Source, SHA256: s.SHA256, Size: s.Size}, nil)
			l := a.log.WithFields(map[string]any{"model": s.Model, "source": s.Source})
			switch {
			case err != nil && context.Cause(sctx) != nil:
				l.WithError(context.Cause(sctx)).Warn("seed ask given up; the next ask for it starts again")
			case err != nil:
				l.WithError(err).Warn("seed ask failed")
			default:
				l.Info("seeded")
			}
		}()
	}
}

// seedCheck is how often a seed's progress is looked at.
const seedCheck = time.Second

// watchSeed cancels a seed's fetch of source once no byte of it has landed
// for fetch_deadline: the time a job's Prolog waits for weights is the
// time a fetch may stand still. A seed ran without any deadline, so one
// that could not move (a wedged swarm, an origin that stopped sending)
// never ended, and every later ask for its source was taken for the one
// under way until the agent restarted (issue 24). A seed that moves runs
// as long as it moves, as a fetch a Prolog waits for does.
func (a *Agent) watchSeed(ctx context.Context, cancel context.CancelCauseFunc, source string) {
	moved := time.Now()
	t := time.NewTicker(seedCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		limit := a.cfg.FetchDeadline
		if fl := a.flights[source]; fl != nil && fl.fetch != nil && fl.fetch.progressed.After(moved) {
			moved = fl.fetch.progressed
		}
		a.mu.Unlock()
		if limit > 0 && time.Since(moved) >= limit {
			cancel(fmt.Errorf("seed of %s: no byte landed for %v (fetch_deadline)", source, limit))
			return
		}
	}
}
