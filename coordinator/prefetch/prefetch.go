// Package prefetch warms the nodes Slurm plans for pending jobs (issue 28).
//
// Backfill, and only backfill, gives a pending job the nodes it means to
// start it on (SchedNodes) and when (StartTime). The Prefetcher reads every
// pending job's plan in one squeue call per backfill interval (bf_interval,
// read from the controller's configuration), keeps the jobs that name an
// llmgw model, and acts on a plan only once two reads in a row show it the
// same: backfill clears every plan at the start of each cycle and yields
// its locks mid-cycle, so one read may catch a job without a plan, and a
// plan that moved is not worth bytes until it holds. For each planned node
// that lacks the model, within the horizon (a start further off may move
// many times first) and within the node's byte budget, it keeps an ask the
// coordinator hands the node in the answer to its next report, as seed
// asks ride; a plan that moves away, or a job that starts or leaves the
// queue, drops the ask, and the agent cancels that prefetch, keeping its
// partial bytes to resume.
//
// The Prefetcher decides nothing about disk or bandwidth on the node: the
// agent runs a prefetch below every fetch a job waits for and only in room
// it can take without evicting. It never calls slurmctld more than once per
// interval, besides one read of the configuration every ten minutes.
package prefetch

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// Defaults.
const (
	// DefaultHorizon is how far ahead of a job's expected start its nodes
	// are asked to fetch: long enough for a large model over a slow link,
	// short enough that a plan which will move many times (a start hours
	// away behind jobs that may end early) costs no bytes yet.
	DefaultHorizon = 30 * time.Minute
	// DefaultMaxBytes is how many bytes of prefetches one node is asked to
	// hold at once (prefetch_max_bytes): a few large models.
	DefaultMaxBytes = 500_000_000_000
	// configEvery is how often the controller's configuration is read
	// again for bf_interval and SchedulerType.
	configEvery = 10 * time.Minute
	// nullReads is how many reads in a row may show a job without a plan
	// (backfill read mid-cycle, or not reached: bf_max_job_test) before the
	// plan it had is dropped.
	nullReads = 3
	// maxJobs bounds the pending jobs watched; the earliest starts win.
	maxJobs = 10_000
	// startSettle is how long after a job's first start report its other
	// nodes may still report before the start is counted.
	startSettle = 2 * time.Minute
	// maxStarts bounds the job starts being gathered.
	maxStarts = 10_000
)

// Config is the Prefetcher's configuration.
type Config struct {
	// Horizon: see DefaultHorizon (zero: the default).
	Horizon time.Duration
	// MaxBytes bounds the bytes one node is asked to prefetch at once
	// (zero: DefaultMaxBytes; negative: no bound).
	MaxBytes int64
	// Interval overrides the backfill interval read from Slurm (tests).
	Interval time.Duration
	// ReportInterval is how often agents report: an ask reaches a node
	// within it, and a list stands for three of them without word.
	ReportInterval time.Duration
	// WarmMax is the longest a job that asked to wait for its weights is
	// held (zero: DefaultWarmMax).
	WarmMax time.Duration
}

// Slurm is what the Prefetcher asks of Slurm (*slurm.Runner).
type Slurm interface {
	PendingPlans(ctx context.Context) ([]slurm.PendingJob, error)
	ShowConfig(ctx context.Context) (slurm.Config, error)
}

// A Model is a catalog model as the Prefetcher needs it.
type Model struct {
	Name, Source, SHA256 string
	Size                 int64
	// Why is why no node can be asked to fetch it ("" when one can): a
	// path, a model id.
	Why string
}

// A Node is one node as the coordinator's presence model sees it now.
type Node struct {
	// Fresh: it reported within its stale interval.
	Fresh bool
	// Holds says whether it can serve model without fetching.
	Holds func(model string) bool
	// Done is the bytes it has of source, from its last report (a fetch in
	// progress, or a prefetch it holds partially); zero when none.
	Done func(source string) int64
	// CacheDir is "" when it has no fetch cache; CacheFree its free bytes.
	CacheDir  string
	CacheFree int64
}

// Presence reads the coordinator's view; each call takes its lock once.
type Presence interface {
	Model(name string) (Model, bool)
	Node(name string) (Node, bool)
}

// Prefetcher is the coordinator's prefetch loop and what it last decided.
type Prefetcher struct {
	cfg      Config
	slurm    Slurm
	presence Presence
	log      logrus.FieldLogger
	now      func() time.Time
	metrics  *metrics

	mu       sync.Mutex
	interval time.Duration
	off      string // why there is no plan to read ("" when there is)
	reads    int    // reads since start
	lastRead time.Time
	lastErr  string
	calls    []time.Time // within the last minute
	jobs     map[string]*job
	asks     map[string][]api.PrefetchAsk
	status   []api.PrefetchStatus
	// starts gathers job starts until every node of the job reported.
	starts     map[string]*start
	warm, cold int64
	recent     []api.JobStart // the latest counted, oldest first
	bytes      map[string]api.PrefetchBytes
	// states are each node's prefetches as it last reported them.
	states map[string][]api.PrefetchState
	// warmAsked is when each job was first asked about (Warm).
	warmAsked map[string]time.Time
	// gone remembers the node counts of jobs that left the queue, for
	// their starts.
	gone map[string]goneJob
}

type job struct {
	id, model string
	warm      bool
	numNodes  int
	// plan is the last plan read (nil: none yet), start its expected start.
	plan  []string
	start time.Time
	// acted is the plan acted on: the same in two reads in a row.
	acted []string
	nulls int
	order int // position in the last read, for a stable status
}

type start struct {
	model      string
	warm, cold map[string]bool
	first      time.Time
	want       int
}

type goneJob struct {
	numNodes int
	at       time.Time
}

// New returns a Prefetcher; Run reads the plans until its context ends.
// reg, when set, gets its metrics.
func New(cfg Config, s Slurm, p Presence, log logrus.FieldLogger, reg prometheus.Registerer) *Prefetcher {
	if cfg.Horizon <= 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.ReportInterval <= 0 {
		cfg.ReportInterval = 30 * time.Second
	}
	pf := &Prefetcher{cfg: cfg, slurm: s, presence: p, log: log, now: time.Now,
		jobs: map[string]*job{}, asks: map[string][]api.PrefetchAsk{}, starts: map[string]*start{},
		bytes: map[string]api.PrefetchBytes{}, gone: map[string]goneJob{}, states: map[string][]api.PrefetchState{},
		warmAsked: map[string]time.Time{}}
	pf.metrics = newMetrics(pf)
	if reg != nil {
		reg.MustRegister(pf.metrics.collectors()...)
	}
	return pf
}

// Run reads the plans every backfill interval until ctx ends. A read of
// the configuration takes the place of that interval's read of the plans,
// so slurmctld never hears from the prefetcher more than once an interval.
func (p *Prefetcher) Run(ctx context.Context) {
	var confAt time.Time
	for {
		conf := confAt.IsZero() || p.now().Sub(confAt) >= configEvery
		if conf {
			p.readConfig(ctx)
			confAt = p.now()
		}
		p.mu.Lock()
		every, off := p.interval, p.off
		p.mu.Unlock()
		switch {
		case off != "":
			every = configEvery
		case !conf:
			p.Read(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// readConfig learns the backfill interval, or that nothing plans.
func (p *Prefetcher) readConfig(ctx context.Context) {
	every := p.cfg.Interval
	off := ""
	if every <= 0 {
		p.called()
		c, err := p.slurm.ShowConfig(ctx)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			if p.interval == 0 {
				p.interval = 30 * time.Second
			}
			p.lastErr = "reading bf_interval: " + err.Error()
			p.log.WithError(err).Warn("prefetch: cannot read slurmctld's configuration; reading plans every " + p.interval.String())
			return
		}
		var ok bool
		if every, ok = slurm.BackfillInterval(c); !ok {
			sched, _ := c.Get("SchedulerType")
			off = fmt.Sprintf("SchedulerType=%s plans no pending job (only sched/backfill sets SchedNodes); nothing to prefetch", sched)
		}
	} else {
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	if off != p.off || every != p.interval {
		if off != "" {
			p.log.Warn("prefetch: " + off)
		} else {
			p.log.WithField("interval", every.String()).Info("prefetch: reading backfill's plans once per bf_interval")
		}
	}
	p.interval, p.off = every, off
}

func (p *Prefetcher) called() {
	now := p.now()
	p.mu.Lock()
	p.calls = append(p.calls, now)
	p.mu.Unlock()
	p.metrics.calls.Inc()
}

// callsLocked is the calls to slurmctld within the last minute.
func (p *Prefetcher) callsLocked(now time.Time) int {
	i := 0
	for i < len(p.calls) && now.Sub(p.calls[i]) >= time.Minute {
		i++
	}
	p.calls = p.calls[i:]
	return len(p.calls)
}

// Read reads the plans once and decides the asks.
func (p *Prefetcher) Read(ctx context.Context) {
	p.called()
	pending, err := p.slurm.PendingPlans(ctx)
	now := p.now()
	if err != nil {
		p.metrics.errors.Inc()
		p.mu.Lock()
		if p.lastErr == "" {
			p.log.WithError(err).Warn("prefetch: cannot read the pending jobs' plans; the asks stand until a read works")
		}
		p.lastErr = err.Error()
		p.mu.Unlock()
		return
	}
	p.metrics.lastRead.Set(float64(now.Unix()))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr != "" {
		p.log.Info("prefetch: reading plans again")
	}
	p.lastErr, p.lastRead = "", now
	p.reads++
	p.observe(pending, now)
	p.decide(now)
}

// observe updates the watched jobs from one read.
func (p *Prefetcher) observe(pending []slurm.PendingJob, now time.Time) {
	seen := make(map[string]bool, len(pending))
	var named []slurm.PendingJob
	for _, pj := range pending {
		if pj.Model != "" {
			named = append(named, pj)
		}
	}
	// The earliest starts first, so the bound keeps the ones that matter.
	slices.SortStableFunc(named, func(a, b slurm.PendingJob) int { return cmpStart(a.Start, b.Start) })
	if len(named) > maxJobs {
		named = named[:maxJobs]
	}
	for i, pj := range named {
		seen[pj.ID] = true
		j := p.jobs[pj.ID]
		if j == nil {
			j = &job{id: pj.ID}
			p.jobs[pj.ID] = j
		}
		j.model, j.warm, j.numNodes, j.order = pj.Model, pj.Warm, pj.NumNodes, i
		switch {
		case len(pj.Nodes) == 0:
			// Read mid-cycle, or beyond bf_max_job_test: no news, unless
			// it lasts.
			j.nulls++
			if j.nulls >= nullReads {
				j.plan, j.acted = nil, nil
			}
			continue
		case slices.Equal(pj.Nodes, j.plan):
			if j.acted == nil {
				p.log.WithFields(logrus.Fields{"job": j.id, "model": j.model, "nodes": slurm.Compress(pj.Nodes)}).Info("prefetch: plan held for two reads; asking its nodes")
			}
			j.acted = j.plan
		default:
			if j.acted != nil {
				p.log.WithFields(logrus.Fields{"job": j.id, "model": j.model, "from": slurm.Compress(j.acted), "to": slurm.Compress(pj.Nodes)}).Info("prefetch: plan moved; its asks are dropped until it holds")
			}
			j.acted = nil
		}
		j.nulls = 0
		j.plan, j.start = pj.Nodes, pj.Start
	}
	for id, j := range p.jobs {
		if !seen[id] {
			// Started, cancelled or beyond the bound: its asks go.
			delete(p.jobs, id)
			delete(p.warmAsked, id)
			p.gone[id] = goneJob{numNodes: j.numNodes, at: now}
		}
	}
	for id, g := range p.gone {
		if now.Sub(g.at) > time.Hour {
			delete(p.gone, id)
		}
	}
}

func cmpStart(a, b time.Time) int {
	switch {
	case a.IsZero() && b.IsZero():
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// decide makes every node's asks and every job's status from the jobs.
func (p *Prefetcher) decide(now time.Time) {
	type want struct {
		ask  api.PrefetchAsk
		need int64 // bytes still to fetch
	}
	perNode := map[string]map[string]*want{}
	jobs := make([]*job, 0, len(p.jobs))
	for _, j := range p.jobs {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *job) int {
		return cmp.Or(cmpStart(a.start, b.start), cmp.Compare(a.order, b.order))
	})
	status := make([]api.PrefetchStatus, 0, len(jobs))
	// held collects, per job, why a node's ask was cut by its budget.
	type key struct{ job, node string }
	for _, j := range jobs {
		st := api.PrefetchStatus{Job: j.id, Model: j.model, Start: j.start, State: api.PlanWatching, Warm: j.warm}
		plan := j.acted
		if plan == nil {
			plan = j.plan
		}
		st.Nodes = slurm.Compress(plan)
		m, ok := p.presence.Model(j.model)
		switch {
		case !ok:
			st.State, st.Why = api.PlanHeld, "model "+j.model+" is not in the catalog"
		case m.Why != "":
			st.State, st.Why = api.PlanHeld, m.Why
		case j.acted == nil && len(j.plan) == 0:
			st.Why = "no plan from backfill yet"
		case j.acted == nil:
			st.Why = "plan seen once; acted on when the next read shows it the same"
		case !j.start.IsZero() && j.start.Sub(now) > p.cfg.Horizon:
			st.State = api.PlanHeld
			st.Why = fmt.Sprintf("starts in %s, beyond the horizon of %s", j.start.Sub(now).Round(time.Second), p.cfg.Horizon)
		default:
			st.State = api.PlanWarm
			for _, n := range j.acted {
				node, ok := p.presence.Node(n)
				if !ok || !node.Fresh {
					st.NodeStates = append(st.NodeStates, n+"=no-report")
					st.State = api.PlanAsked
					continue
				}
				if node.Holds(m.Name) {
					st.NodeStates = append(st.NodeStates, n+"=holds")
					continue
				}
				st.State = api.PlanAsked
				done := node.Done(m.Source)
				state := "asked"
				for _, ps := range p.states[n] {
					if ps.Source == m.Source {
						state, done = ps.State, max(done, ps.Done)
					}
				}
				st.Done += done
				st.Total += m.Size
				if node.CacheDir == "" {
					st.NodeStates = append(st.NodeStates, n+"=no-cache")
					continue
				}
				st.NodeStates = append(st.NodeStates, n+"="+state)
				if perNode[n] == nil {
					perNode[n] = map[string]*want{}
				}
				w := perNode[n][m.Name]
				if w == nil {
					w = &want{ask: api.PrefetchAsk{Model: m.Name, Source: m.Source, SHA256: m.SHA256, Size: m.Size, Start: j.start},
						need: max(m.Size-done, 0)}
					perNode[n][m.Name] = w
				}
				w.ask.Jobs = append(w.ask.Jobs, j.id)
				if cmpStart(j.start, w.ask.Start) < 0 {
					w.ask.Start = j.start
				}
			}
		}
		status = append(status, st)
	}
	asks := make(map[string][]api.PrefetchAsk, len(perNode))
	cut := map[key]bool{}
	for n, ws := range perNode {
		list := make([]*want, 0, len(ws))
		for _, w := range ws {
			list = append(list, w)
		}
		slices.SortFunc(list, func(a, b *want) int {
			return cmp.Or(cmpStart(a.ask.Start, b.ask.Start), strings.Compare(a.ask.Model, b.ask.Model))
		})
		var total int64
		for _, w := range list {
			if p.cfg.MaxBytes > 0 && (w.ask.Size <= 0 || total+w.ask.Size > p.cfg.MaxBytes) {
				for _, id := range w.ask.Jobs {
					cut[key{id, n}] = true
				}
				continue
			}
			total += w.ask.Size
			asks[n] = append(asks[n], w.ask)
		}
	}
	for i := range status {
		st := &status[i]
		for k, s := range st.NodeStates {
			node, _, _ := strings.Cut(s, "=")
			if cut[key{st.Job, node}] {
				st.NodeStates[k] = node + "=over-budget"
				if st.Why == "" {
					st.Why = fmt.Sprintf("over prefetch_max_bytes (%d) on %s, or of unknown size", p.cfg.MaxBytes, node)
				}
			}
		}
	}
	p.asks, p.status = asks, status
	p.metrics.setJobs(status)
}

// Asks is the list for node's report answer: nil until two reads have been
// made (a coordinator just started has not seen a plan hold yet, and must
// not cancel what its predecessor asked).
func (p *Prefetcher) Asks(node string) *api.PrefetchList {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reads < 2 && p.off == "" {
		return nil
	}
	// "asks": [] rather than null: an empty list is an answer (cancel
	// what you run), not an absent one.
	return &api.PrefetchList{Asks: append([]api.PrefetchAsk{}, p.asks[node]...), Lease: (3 * p.cfg.ReportInterval).Seconds()}
}

// Observe takes what one node's report says of prefetches and job starts.
func (p *Prefetcher) Observe(node string, r *api.Report) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.PrefetchBytes != nil {
		p.bytes[node] = *r.PrefetchBytes
	}
	if len(r.Prefetches) > 0 {
		p.states[node] = slices.Clone(r.Prefetches)
	} else {
		delete(p.states, node)
	}
	for _, s := range r.Starts {
		st := p.starts[s.Job]
		if st == nil {
			if len(p.starts) >= maxStarts {
				continue
			}
			want := 0
			if g, ok := p.gone[s.Job]; ok {
				want = g.numNodes
			} else if j, ok := p.jobs[s.Job]; ok {
				want = j.numNodes
			}
			st = &start{model: s.Model, warm: map[string]bool{}, cold: map[string]bool{}, first: now, want: want}
			p.starts[s.Job] = st
		}
		if s.Warm {
			st.warm[node] = true
		} else {
			st.cold[node] = true
		}
	}
	p.settleLocked(now)
}

// settleLocked counts the starts every node reported, or that waited long
// enough for the rest.
func (p *Prefetcher) settleLocked(now time.Time) {
	for id, st := range p.starts {
		n := len(st.warm) + len(st.cold)
		if (st.want > 0 && n >= st.want) || now.Sub(st.first) >= startSettle {
			warm := len(st.cold) == 0 && (st.want == 0 || len(st.warm) >= st.want)
			if warm {
				p.warm++
				p.metrics.starts.WithLabelValues("warm").Inc()
			} else {
				p.cold++
				p.metrics.starts.WithLabelValues("cold").Inc()
			}
			if len(p.recent) >= 256 {
				p.recent = p.recent[1:]
			}
			p.recent = append(p.recent, api.JobStart{Job: id, Model: st.model, Warm: warm, Time: st.first})
			delete(p.starts, id)
		}
	}
}

// Status is the prefetcher's state for GET /v1/status.
func (p *Prefetcher) Status() *api.PrefetchSummary {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settleLocked(now)
	s := &api.PrefetchSummary{Interval: p.interval.Seconds(), Horizon: p.cfg.Horizon.Seconds(), LastRead: p.lastRead,
		Error: p.lastErr, CallsPerMinute: p.callsLocked(now), WarmStarts: p.warm, ColdStarts: p.cold, Jobs: slices.Clone(p.status),
		Starts: slices.Clone(p.recent)}
	if p.off != "" && s.Error == "" {
		s.Error = p.off
	}
	nodes := make([]string, 0, len(p.bytes))
	for n := range p.bytes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		s.Bytes.Fetched += p.bytes[n].Fetched
		s.Bytes.Used += p.bytes[n].Used
	}
	if s.Jobs == nil {
		s.Jobs = []api.PrefetchStatus{}
	}
	return s
}

// CheckReport bounds and checks what a report says of prefetches and job
// starts, as the coordinator checks the rest of a report.
func CheckReport(r *api.Report) error {
	const maxStates, maxReportStarts = 64, 1024
	if len(r.Prefetches) > maxStates {
		return fmt.Errorf("lists %d prefetches; the limit is %d", len(r.Prefetches), maxStates)
	}
	if len(r.Starts) > maxReportStarts {
		return fmt.Errorf("lists %d job starts; the limit is %d", len(r.Starts), maxReportStarts)
	}
	for i, s := range r.Prefetches {
		if len(s.Model) > 64 || len(s.Source) > 4096 || s.Done < 0 || s.Total < -1 {
			return fmt.Errorf("prefetches[%d] is not a prefetch this coordinator knows", i)
		}
		switch s.State {
		case api.PrefetchWaiting, api.PrefetchFetching, api.PrefetchPaused, api.PrefetchNoRoom, api.PrefetchDone, api.PrefetchFailed:
		default:
			r.Prefetches[i].State = "unknown"
		}
		r.Prefetches[i].Error = api.StripControl(clip(s.Error, 512))
	}
	for i, s := range r.Starts {
		if !validJob(s.Job) || len(s.Model) > 64 {
			return fmt.Errorf("starts[%d]: %.40q is not a Slurm job id", i, s.Job)
		}
	}
	if b := r.PrefetchBytes; b != nil && (b.Fetched < 0 || b.Used < 0) {
		return fmt.Errorf("prefetch_bytes are negative")
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func validJob(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c == '_' || c == '+') {
			return false
		}
	}
	return true
}
