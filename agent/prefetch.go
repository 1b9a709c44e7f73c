package agent

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/evict"
	"github.com/llmgw/llmgw/weights/fetch"
)

// Prefetches (issue 28). The coordinator hands the node, in the answer to
// each report, the whole list of models backfill's plans want here soon
// (api.PrefetchList). The agent fetches them one at a time, earliest start
// first, through the same ensure a Prolog uses (so through the fabric's
// swarm: a fabric still reads the origin once): a model of one file as the
// ask names it, a model of several files and a Hub repository as the
// node's catalog copy has them (prefetchkinds.go), with these rules:
//
//   - Below every job. A job's ensure of a remote source stops the running
//     prefetch of any other source before it starts (ensureAs calls yield),
//     and no prefetch starts while a job's fetch is in flight: the link and
//     the cache's claim record are the job's. The prefetch resumes from its
//     .part afterwards. A job that wants the very source a prefetch is
//     fetching joins that fetch (one fetch per source per node), so it is
//     never queued behind it; from then on the fetch is the job's.
//   - No eviction, no one else's space. A prefetch is held to the cache's
//     budget at prefetch priority (Agent.Room with evict.Prefetch: what is
//     left below cache_low once the cache's entries and every claim in the
//     node's space record are counted, the claims of the fetches jobs
//     wait for included). It starts only when what it still needs fits
//     there, its fetch claims its room against the same budget
//     (fetch.Ahead, Fetcher.PrefetchRoom) and never has anything evicted
//     for it. So prefetches fill the cache at most to where an eviction
//     pass stops, never trigger one, and what they brought that no job
//     has used is the first an eviction takes (agent/evict.go).
//   - Cancelled, bytes kept. A source the list no longer names is
//     cancelled; its .part stays, and a later ask or a job resumes it. A
//     list that has not been renewed within its lease ends the same way.
//
// What the node fetched for prefetches, and how much of it a job then used
// (a Prolog found it, joined it, or its record names it), is counted for
// the report and the metrics.

// pfRetry is how long a failed prefetch waits before it is tried again.
const pfRetry = time.Minute

// pfHold is how long a job's fetch keeps prefetches from starting after it
// asked, so that none starts in the moment before its flight is recorded.
const pfHold = 2 * time.Second

// Room answers whether a claim of n more bytes at priority p fits in the
// cache's budget without evicting anything, and why not: the agent's Room,
// asked at evict.Prefetch.
type Room func(ctx context.Context, n int64, p evict.Priority) (evictBytes int64, ok bool, why string, err error)

// pfNoRoomRetry is how often a prefetch that found no room looks again:
// the budget is a listing of the cache, not a statfs.
const pfNoRoomRetry = 10 * time.Second

type pfItem struct {
	ask api.PrefetchAsk
	// model is the ask's model in the node's catalog copy, when that has
	// it at the ask's source (looked: the copy was read for it); it says a
	// set or a Hub model from one file.
	model   *catalog.Model
	looked  bool
	state   string
	err     string
	done    int64
	cancel  context.CancelFunc
	stopped chan struct{}
	retryAt time.Time
	// current is the source its ensure is fetching now: the ask's, or
	// one file of a set's.
	current string
}

// prefetcher is the agent's side of issue 28.
type prefetcher struct {
	a    *Agent
	room Room
	kick chan struct{}

	mu      sync.Mutex
	items   []*pfItem // in the order asked: earliest start first
	lease   time.Time
	holdTo  time.Time
	running *pfItem
	// unused are, per source, prefetched bytes no job has used yet.
	unused          map[string]int64
	fetchedN, usedN int64
}

func newPrefetcher(a *Agent) *prefetcher {
	return &prefetcher{a: a, kick: make(chan struct{}, 1), unused: map[string]int64{}}
}

func (p *prefetcher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// set takes the coordinator's list: new asks are added, those it no longer
// names are cancelled.
func (p *prefetcher) set(l *api.PrefetchList, now time.Time) {
	// The node's catalog copy says what each model is: read (outside the
	// lock a job's ensure takes) only when the list brings an ask not
	// looked up yet, after the report's catalog refresh, so a model just
	// added is in it.
	p.mu.Lock()
	looked := map[[2]string]bool{}
	for _, it := range p.items {
		if it.looked {
			looked[[2]string{it.ask.Model, it.ask.Source}] = true
		}
	}
	p.mu.Unlock()
	var cp catalog.Copy
	for _, ask := range l.Asks {
		if !looked[[2]string{ask.Model, ask.Source}] {
			cp, _ = catalog.ReadCopy(p.a.catalog.Path)
			break
		}
	}

	p.mu.Lock()
	lease := time.Duration(l.Lease * float64(time.Second))
	if lease <= 0 {
		lease = 3 * p.a.Config().ReportInterval
	}
	p.lease = now.Add(lease)
	keep := make([]*pfItem, 0, len(l.Asks))
	old := map[string]*pfItem{}
	for _, it := range p.items {
		old[it.ask.Source] = it
	}
	asks := slices.Clone(l.Asks)
	slices.SortStableFunc(asks, func(a, b api.PrefetchAsk) int { return a.Start.Compare(b.Start) })
	named := map[string]bool{}
	for _, ask := range asks {
		if named[ask.Source] || catalog.KindOf(ask.Source) != catalog.KindRemote {
			continue
		}
		named[ask.Source] = true
		it := old[ask.Source]
		if it == nil {
			it = &pfItem{state: api.PrefetchWaiting}
			p.a.log.WithField("model", ask.Model).WithField("jobs", ask.Jobs).Info("prefetch asked")
		}
		if !it.looked || it.ask.Model != ask.Model || it.ask.Source != ask.Source {
			it.model, it.looked = nil, true
			if m, ok := cp.Lookup(ask.Model); ok && m.Source == ask.Source {
				it.model = &m
			}
		}
		it.ask = ask
		keep = append(keep, it)
	}
	for src, it := range old {
		if !named[src] {
			p.stopLocked(it, "")
			if it.state != api.PrefetchDone {
				p.a.log.WithField("model", it.ask.Model).Info("prefetch no longer asked (the plan moved, or the job started or left); cancelled, bytes kept")
			}
		}
	}
	p.items = keep
	p.mu.Unlock()
	p.poke()
}

// stopLocked cancels it if it runs; state, when set, is what it becomes.
func (p *prefetcher) stopLocked(it *pfItem, state string) {
	if it.cancel != nil {
		it.cancel()
	}
	if state != "" {
		it.state = state
	}
}

// yield is called by a job's ensure of source before it starts: the
// running prefetch of any other source stops, and none starts for a
// moment. It waits (briefly) for the stopped prefetch to let go.
func (p *prefetcher) yield(source string) {
	p.mu.Lock()
	p.holdTo = time.Now().Add(pfHold)
	it := p.running
	var wait chan struct{}
	if it != nil && it.current != source {
		p.stopLocked(it, api.PrefetchPaused)
		wait = it.stopped
	}
	p.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(2 * time.Second):
		}
	}
}

// fetched counts bytes a prefetch-only fetch brought into the cache entry
// entry (usedName: a file, a set directory, a Hub snapshot).
func (p *prefetcher) fetched(entry string, n int64) {
	p.mu.Lock()
	p.unused[entry] += n
	p.fetchedN += n
	p.mu.Unlock()
	p.a.metrics.prefetchBytes.WithLabelValues("fetched").Add(float64(n))
}

// used says a job started with the cache entry entry: what prefetches
// fetched of it is used.
func (p *prefetcher) used(entry string) {
	p.mu.Lock()
	n := p.unused[entry]
	delete(p.unused, entry)
	p.usedN += n
	p.mu.Unlock()
	if n > 0 {
		p.a.metrics.prefetchBytes.WithLabelValues("used").Add(float64(n))
	}
}

// jobFetching says whether a job waits for a fetch on the node now.
func (p *prefetcher) jobFetching() bool {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	for _, fl := range p.a.flights {
		if fl.waiters > fl.prefetches {
			return true
		}
	}
	return false
}

// run is the prefetch loop: once a second, or when poked.
func (p *prefetcher) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		p.step(ctx, time.Now())
		select {
		case <-ctx.Done():
			p.mu.Lock()
			for _, it := range p.items {
				p.stopLocked(it, "")
			}
			p.mu.Unlock()
			return
		case <-t.C:
		case <-p.kick:
		}
	}
}

// step starts, pauses or ends prefetches as the list and the node's jobs
// say.
func (p *prefetcher) step(ctx context.Context, now time.Time) {
	jobBusy := p.jobFetching()
	cfg := p.a.Config()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.items) > 0 && now.After(p.lease) {
		p.a.log.Info("prefetch list not renewed within its lease; cancelling, bytes kept")
		for _, it := range p.items {
			p.stopLocked(it, "")
		}
		p.items = nil
	}
	if jobBusy || now.Before(p.holdTo) {
		if it := p.running; it != nil {
			p.stopLocked(it, api.PrefetchPaused)
		}
		return
	}
	if p.running != nil || cfg.CacheDir == "" {
		return
	}
	for _, it := range p.items {
		switch it.state {
		case api.PrefetchDone:
			continue
		case api.PrefetchFailed:
			if now.Before(it.retryAt) {
				continue
			}
		}
		if it.state == api.PrefetchNoRoom && now.Before(it.retryAt) {
			continue
		}
		ms := measure(cfg, it)
		it.done = ms.have
		switch {
		case ms.present:
			it.state = api.PrefetchDone
			continue
		case ms.why != "":
			it.state, it.err, it.retryAt = api.PrefetchNoRoom, ms.why, now.Add(pfNoRoomRetry)
			continue
		}
		if ms.need > 0 {
			_, ok, why, err := p.room(ctx, ms.need, evict.Prefetch)
			if err != nil {
				why = "the cache's budget cannot be told: " + err.Error()
			}
			if err != nil || !ok {
				it.state, it.err, it.retryAt = api.PrefetchNoRoom, why, now.Add(pfNoRoomRetry)
				continue
			}
		}
		p.startLocked(ctx, it)
		return
	}
}

func (p *prefetcher) startLocked(ctx context.Context, it *pfItem) {
	fctx, cancel := context.WithCancel(ctx)
	it.cancel, it.stopped, it.state, it.err = cancel, make(chan struct{}), api.PrefetchFetching, ""
	it.current = it.ask.Source
	p.running = it
	log := p.a.log.WithField("model", it.ask.Model).WithField("source", it.ask.Source)
	log.Info("prefetch started")
	go func() {
		err := p.ensure(fctx, it)
		cancelled := fctx.Err() != nil
		cancel()
		p.mu.Lock()
		switch {
		case err == nil:
			it.state, it.done = api.PrefetchDone, max(it.ask.Size, it.done)
			log.Info("prefetched")
		case cancelled:
			if it.state == api.PrefetchFetching {
				it.state = api.PrefetchWaiting
			}
		case errors.Is(err, fetch.ErrNoSpace):
			// The budget moved between the look and the claim (a job's
			// fetch claimed, another tenant grew): no room, looked at again.
			it.state, it.err, it.retryAt = api.PrefetchNoRoom, errString(err), time.Now().Add(pfNoRoomRetry)
			log.WithError(err).Info("prefetch found no room in the cache's budget; waiting")
		default:
			it.state, it.err, it.retryAt = api.PrefetchFailed, errString(err), time.Now().Add(pfRetry)
			if !errors.Is(err, context.Canceled) {
				log.WithError(err).Warn("prefetch failed; tried again in a minute while it is asked")
			}
		}
		it.cancel = nil
		if p.running == it {
			p.running = nil
		}
		close(it.stopped)
		p.mu.Unlock()
		p.poke()
	}()
}

// states is what the report and the status say of the prefetches.
func (p *prefetcher) states() ([]api.PrefetchState, *api.PrefetchBytes) {
	fetches := map[string]api.Fetch{}
	for _, f := range p.a.fetchesNow(time.Now()) {
		fetches[f.Source] = f
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []api.PrefetchState
	for _, it := range p.items {
		s := api.PrefetchState{Model: it.ask.Model, Source: it.ask.Source, State: it.state, Done: it.done, Total: it.ask.Size, Error: it.err}
		if f, ok := fetches[it.ask.Source]; ok {
			s.Done = max(s.Done, f.Done)
		}
		if f, ok := fetches[it.current]; ok && it.current != it.ask.Source && it.state == api.PrefetchFetching {
			// One file of a set: what the set held when it started, and
			// what that file's fetch brought since.
			s.Done = max(s.Done, it.done+f.Done)
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b api.PrefetchState) int { return cmp.Compare(a.Model, b.Model) })
	var b *api.PrefetchBytes
	if p.fetchedN > 0 || p.usedN > 0 {
		b = &api.PrefetchBytes{Fetched: p.fetchedN, Used: p.usedN}
	}
	return out, b
}

var prefetchesDesc = prometheus.NewDesc("llmgw_agent_prefetches",
	"Prefetches the coordinator asked of this node, by state (waiting, fetching, paused, no-room, done, failed): a fetch no job waits for, apart from the ones jobs wait for (fetches_in_progress counts both while bytes move).",
	[]string{"state"}, nil)

// prefetchCollector exports the prefetches by state.
type prefetchCollector struct{ p *prefetcher }

func (c prefetchCollector) Describe(ch chan<- *prometheus.Desc) { ch <- prefetchesDesc }

func (c prefetchCollector) Collect(ch chan<- prometheus.Metric) {
	n := map[string]int{}
	c.p.mu.Lock()
	for _, it := range c.p.items {
		n[it.state]++
	}
	c.p.mu.Unlock()
	for _, s := range []string{api.PrefetchWaiting, api.PrefetchFetching, api.PrefetchPaused, api.PrefetchNoRoom, api.PrefetchDone, api.PrefetchFailed} {
		ch <- prometheus.MustNewConstMetric(prefetchesDesc, prometheus.GaugeValue, float64(n[s]), s)
	}
}
