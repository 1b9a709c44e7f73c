package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// rateWindow is how far back a fetch's rate looks: long enough to smooth
// the one-second progress ticks, short enough that a stall shows within
// seconds rather than as a slowly sinking average.
const rateWindow = 5 * time.Second

// flight is every ensure on this node waiting for one source. The Fetcher
// already shares one download among them; the flight is what the agent
// adds: the progress each waiting hook is streamed, and the entry in the
// report's list of fetches in progress.
type flight struct {
	source string
	// entry is the cache entry it fills (usedName): what prefetched bytes
	// are counted against until a job uses them.
	entry   string
	waiters int
	// prefetches are the waiters that are prefetches (issue 28): a flight
	// whose every waiter is one is a prefetch, in the report and the
	// metrics, and its bytes are counted as prefetched. jobJoined says a
	// job waited on it at some point: then what it brings is the job's.
	prefetches int
	jobJoined  bool
	subs       map[*subscriber]struct{}

	// fetch is nil until bytes move: a source that is already present, a
	// path, or a model id never shows as a fetch.
	fetch *fetchState
	// resumed says a .part was there when the flight began, so the first
	// progress figure includes bytes fetched by an earlier attempt, which
	// must not be counted again in the fetched-bytes metric.
	resumed bool
	// counted makes one failed fetch one error, however many waited on it.
	counted bool
}

type fetchState struct {
	started    time.Time
	progressed time.Time
	done       int64
	total      int64
	samples    []sample // newest last, within rateWindow (plus one older)
}

type sample struct {
	t    time.Time
	done int64
}

// rate is bytes per second over the last rateWindow, measured up to now so
// that a fetch that stopped delivering decays to zero.
func (f *fetchState) rate(now time.Time) float64 {
	if len(f.samples) < 2 {
		return 0
	}
	first := f.samples[0]
	el := now.Sub(first.t).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(f.done-first.done) / el
}

func (f *fetchState) api(source string, now time.Time) api.Fetch {
	return api.Fetch{Source: source, Done: f.done, Total: f.total, Rate: f.rate(now), Started: f.started, Progressed: f.progressed}
}

// ensureKind says who waits: a job (a Prolog, a seed: anything an admin or
// a user waits for) or a prefetch, which runs below every job's fetch.
type ensureKind int

const (
	forJob ensureKind = iota
	forPrefetch
)

// subscriber is one waiting hook's view of its flight: only the newest
// progress matters, so a slow reader gets the latest figure, never a backlog.
type subscriber struct {
	mu     sync.Mutex
	latest api.Fetch
	has    bool
	notify chan struct{}
}

func newSubscriber() *subscriber { return &subscriber{notify: make(chan struct{}, 1)} }

func (s *subscriber) set(f api.Fetch) {
	s.mu.Lock()
	s.latest, s.has = f, true
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the newest progress if any arrived since the last take.
func (s *subscriber) take() (api.Fetch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.latest, s.has
	s.has = false
	return f, ok
}

// ensure makes source present through the agent's Fetcher, streaming its
// progress to sub (which may be nil). The Fetcher runs one download per
// source for the node whatever the number of callers; the flight here fans
// its progress out to all of them.
func (a *Agent) ensure(ctx context.Context, req api.EnsureRequest, sub *subscriber) (string, error) {
	return a.ensureAs(ctx, req, sub, forJob)
}

// ensureAs is ensure for a job or for a prefetch. A job's ensure of a
// remote source first stops the prefetches of other sources (they resume
// after it): the node's link and the fetch's claim on the cache's space
// are the job's. A job that wants the source a prefetch is fetching joins
// that fetch, which then is the job's, bytes already fetched included.
func (a *Agent) ensureAs(ctx context.Context, req api.EnsureRequest, sub *subscriber, kind ensureKind) (string, error) {
	if kind == forJob && catalog.KindOf(req.Source) == catalog.KindRemote {
		a.prefetch.yield(req.Source)
		a.prefetch.used(usedName(req))
	}
	if kind == forPrefetch {
		// Held to the cache's budget at prefetch priority, never evicting
		// (fetch.Ahead).
		ctx = fetch.Ahead(ctx)
	}
	a.mu.Lock()
	cfg := a.cfg
	f := a.fetcherLocked()
	fl := a.flights[req.Source]
	if fl == nil {
		fl = &flight{source: req.Source, entry: usedName(req), subs: map[*subscriber]struct{}{}}
		if catalog.KindOf(req.Source) == catalog.KindRemote && req.Hub == nil {
			target := catalog.CachePathFor(f.CacheDir, req.Source)
			if req.Set != "" {
				target = catalog.SetFilePath(filepath.Join(f.CacheDir, req.Set), req.Source)
			}
			_, err := os.Stat(target + catalog.PartSuffix)
			fl.resumed = err == nil
		}
		a.flights[req.Source] = fl
	}
	fl.waiters++
	if kind == forPrefetch {
		fl.prefetches++
	} else {
		fl.jobJoined = true
	}
	if sub != nil {
		fl.subs[sub] = struct{}{}
	}
	a.mu.Unlock()

	var path string
	var err error
	if req.Hub != nil {
		// A Hugging Face repository at one commit, into the node's Hugging
		// Face cache. Through the fabric's swarm is phase 2 of issue 25.
		path, err = f.EnsureHub(ctx, cfg.HFCacheDir(), *req.Hub)
	} else if req.Set != "" {
		// One file of a model of several: into its set directory.
		path, err = f.EnsureIn(ctx, req.Set, req.Source, fetch.Want{SHA256: req.SHA256, Size: req.Size})
	} else if why := a.whyNoSwarm(cfg, req); why == "" {
		// One copy per fabric: through the swarm (issue 18).
		path, err = a.ensureSwarm(ctx, cfg, f, req)
	} else {
		if why != "-" {
			a.swarm.mu.Lock()
			said := a.swarm.said[why]
			a.swarm.said[why] = true
			a.swarm.mu.Unlock()
			if !said {
				a.log.WithField("source", req.Source).Info("not fetching through the fabric's swarm: " + why)
			}
		}
		path, err = f.Ensure(ctx, req.Source, fetch.Want{SHA256: req.SHA256, Size: req.Size})
		if err == nil && a.swarm.addr != "" && req.SHA256 != "" && req.Size > 0 {
			a.holdComplete(req.Source, fetch.Want{SHA256: strings.ToLower(req.SHA256), Size: req.Size}, path)
		}
	}

	a.mu.Lock()
	fl.waiters--
	if kind == forPrefetch {
		fl.prefetches--
	}
	delete(fl.subs, sub)
	moved, joined := fl.fetch != nil, fl.jobJoined
	// Only a remote source is fetched; a missing path is the hook's news,
	// not a failed fetch.
	failed := err != nil && ctx.Err() == nil && !fl.counted && catalog.KindOf(req.Source) == catalog.KindRemote
	if failed {
		fl.counted = true
	}
	last := fl.waiters == 0
	if last && a.flights[req.Source] == fl {
		delete(a.flights, req.Source)
	}
	a.mu.Unlock()

	switch {
	case err == nil && kind == forJob:
		a.noteUse(cfg, usedName(req))
	case err == nil && moved && !joined:
		// A prefetch is no use: what it brought is the first eviction
		// takes within its class until a job uses it.
		a.notePrefetched(cfg, usedName(req))
	}
	if failed {
		a.metrics.fetchErrors.Inc()
		a.recordError("fetch " + errString(err))
		a.log.WithField("source", req.Source).WithError(err).Warn("fetch failed")
	}
	if last && moved {
		// A fetch ended, well or badly: the cache changed or the list of
		// fetches did, and the coordinator should hear of it now.
		a.kick(kickScan)
	}
	return path, err
}

// onProgress is the Fetcher's OnProgress: it updates the fetch's entry and
// passes the figure to every hook waiting for the source.
func (a *Agent) onProgress(p fetch.Progress) {
	now := time.Now()
	a.mu.Lock()
	fl := a.flights[p.Source]
	if fl == nil {
		// Every waiter has gone; this is the fetch winding down.
		a.mu.Unlock()
		return
	}
	fs := fl.fetch
	var delta int64
	if fs == nil {
		// Progressed starts at Started: "no byte since the fetch began" is
		// what a fetch stuck from its first moment looks like.
		fs = &fetchState{started: now, progressed: now, total: p.Total}
		fl.fetch = fs
		if !fl.resumed {
			delta = p.Done
		}
	} else if p.Done > fs.done {
		delta = p.Done - fs.done
	}
	if p.Done > fs.done {
		fs.progressed = now
	}
	fs.done, fs.total = p.Done, p.Total
	fs.samples = append(fs.samples, sample{now, p.Done})
	// Keep the newest sample older than the window, so the window is full.
	for len(fs.samples) > 2 && now.Sub(fs.samples[1].t) >= rateWindow {
		fs.samples = fs.samples[1:]
	}
	f := fs.api(p.Source, now)
	subs := make([]*subscriber, 0, len(fl.subs))
	for s := range fl.subs {
		subs = append(subs, s)
	}
	started := len(fs.samples) == 1
	prefetchOnly, entry := fl.waiters > 0 && fl.waiters == fl.prefetches, fl.entry
	a.mu.Unlock()

	if started {
		// The coordinator shows fetches in progress, so that a job waiting
		// in its Prolog is seen to be waiting on bytes, not stuck.
		a.kick(kickReport)
	}

	if delta > 0 {
		a.metrics.fetchedBytes.Add(float64(delta))
		if prefetchOnly {
			a.prefetch.fetched(entry, delta)
		}
	}
	for _, s := range subs {
		s.set(f)
	}
}

// fetchesNow lists the fetches in progress, oldest first.
func (a *Agent) fetchesNow(now time.Time) []api.Fetch {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []api.Fetch
	for src, fl := range a.flights {
		if fl.fetch != nil {
			f := fl.fetch.api(src, now)
			f.Prefetch = fl.waiters > 0 && fl.waiters == fl.prefetches
			out = append(out, f)
		}
	}
	sortFetches(out)
	return out
}

// ensureError turns an ensure failure into the error a hook is answered
// with: the code says what the hook can do about it.
func ensureError(ctx context.Context, err error) *api.Error {
	var ae *api.Error
	var fe *fetch.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case ctx.Err() != nil:
		return api.Errorf(api.CodeUnavailable, "agent stopped waiting: %v", ctx.Err())
	case errors.Is(err, fetch.ErrNotLocal):
		return api.Errorf(api.CodeNotFound, "%s", err.Error())
	case errors.As(err, &fe) && fe.Op == "parse":
		return api.Errorf(api.CodeInvalid, "%s", err.Error())
	}
	return api.Errorf(api.CodeInternal, "%s", err.Error())
}
