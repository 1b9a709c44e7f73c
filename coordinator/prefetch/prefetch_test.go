package prefetch

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// fakeSlurm answers each PendingPlans with the next read of reads.
type fakeSlurm struct {
	reads [][]slurm.PendingJob
	calls int
	conf  slurm.Config
}

func (f *fakeSlurm) PendingPlans(context.Context) ([]slurm.PendingJob, error) {
	f.calls++
	if len(f.reads) == 0 {
		return nil, errors.New("no more reads")
	}
	r := f.reads[0]
	f.reads = f.reads[1:]
	return r, nil
}

func (f *fakeSlurm) ShowConfig(context.Context) (slurm.Config, error) { f.calls++; return f.conf, nil }

type fakePresence struct {
	models map[string]Model
	holds  map[string][]string // node -> models
	fresh  map[string]bool
}

func (f *fakePresence) Model(name string) (Model, bool) { m, ok := f.models[name]; return m, ok }

func (f *fakePresence) Node(name string) (Node, bool) {
	fresh, ok := f.fresh[name]
	if !ok {
		return Node{}, false
	}
	return Node{Fresh: fresh, CacheDir: "/c", CacheFree: 1 << 40,
		Holds: func(m string) bool { return slices.Contains(f.holds[name], m) },
		Done:  func(string) int64 { return 0 }}, true
}

func newTest(t *testing.T, cfg Config, reads ...[]slurm.PendingJob) (*Prefetcher, *fakeSlurm, *fakePresence, *time.Time) {
	t.Helper()
	fs := &fakeSlurm{reads: reads}
	fp := &fakePresence{
		models: map[string]Model{
			"m1": {Name: "m1", Source: "http://o/m1", SHA256: "aa", Size: 100},
			"m2": {Name: "m2", Source: "http://o/m2", Size: 300},
			"p":  {Name: "p", Source: "/shared/p", Why: "a path, never fetched"},
		},
		holds: map[string][]string{},
		fresh: map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true},
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	now := time.Unix(1_800_000_000, 0)
	p := New(cfg, fs, fp, log, prometheus.NewRegistry())
	p.now = func() time.Time { return now }
	return p, fs, fp, &now
}

func pj(id, model string, start time.Time, nodes ...string) slurm.PendingJob {
	return slurm.PendingJob{ID: id, Model: model, Start: start, Nodes: nodes, NumNodes: max(len(nodes), 1)}
}

func askModels(l *api.PrefetchList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, a := range l.Asks {
		out = append(out, a.Model)
	}
	return out
}

func TestPlanActedOnOnlyWhenItHolds(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	p, _, _, _ := newTest(t, Config{},
		[]slurm.PendingJob{pj("7", "m1", t0, "n1", "n2")},
		[]slurm.PendingJob{pj("7", "m1", t0, "n1", "n2")},
		// Moved to n3: dropped until it holds.
		[]slurm.PendingJob{pj("7", "m1", t0, "n3", "n4")},
		[]slurm.PendingJob{pj("7", "m1", t0, "n3", "n4")},
	)
	ctx := context.Background()
	p.Read(ctx)
	if l := p.Asks("n1"); l != nil {
		t.Fatalf("after one read Asks(n1) = %+v; want nil (no word before two reads)", l)
	}
	p.Read(ctx)
	if got := askModels(p.Asks("n1")); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("after a plan held for two reads Asks(n1) = %v; want [m1]", got)
	}
	if got := p.Asks("n3"); got == nil || len(got.Asks) != 0 {
		t.Fatalf("Asks(n3) = %+v; want an empty list (it is not planned)", got)
	}
	p.Read(ctx)
	if got := askModels(p.Asks("n1")); len(got) != 0 {
		t.Fatalf("after the plan moved Asks(n1) = %v; want none", got)
	}
	if got := askModels(p.Asks("n3")); len(got) != 0 {
		t.Fatalf("a plan seen once on n3 was acted on: Asks(n3) = %v", got)
	}
	p.Read(ctx)
	if got := askModels(p.Asks("n3")); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("after the new plan held Asks(n3) = %v; want [m1]", got)
	}
}

func TestNullReadsKeepThePlanUntilTheyLast(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	plan := []slurm.PendingJob{pj("7", "m1", t0, "n1")}
	null := []slurm.PendingJob{pj("7", "m1", time.Time{})}
	p, _, _, _ := newTest(t, Config{}, plan, plan, null, null, null)
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx)
	for i := 1; i <= nullReads; i++ {
		p.Read(ctx)
		got := askModels(p.Asks("n1"))
		if i < nullReads && !slices.Equal(got, []string{"m1"}) {
			t.Fatalf("after %d read(s) mid-cycle Asks(n1) = %v; want [m1] kept", i, got)
		}
		if i == nullReads && len(got) != 0 {
			t.Fatalf("after %d reads without a plan Asks(n1) = %v; want none", i, got)
		}
	}
}

func TestHoldersHorizonAndBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	soon, later := now.Add(time.Minute), now.Add(2*time.Minute)
	far := now.Add(time.Hour)
	read := []slurm.PendingJob{
		pj("1", "m1", soon, "n1", "n2"),
		pj("2", "m2", later, "n1"), // 100+300 > 350 on n1: cut
		pj("3", "m2", far, "n3"),   // beyond the horizon
		pj("4", "p", soon, "n4"),   // a path
		pj("5", "", soon, "n4"),    // no model
		pj("6", "m2", soon, "n2"),
	}
	p, _, fp, _ := newTest(t, Config{MaxBytes: 350}, read, read)
	fp.holds["n2"] = []string{"m1"}
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx)
	for node, want := range map[string][]string{"n1": {"m1"}, "n2": {"m2"}, "n3": nil, "n4": nil} {
		if got := askModels(p.Asks(node)); !slices.Equal(got, want) {
			t.Errorf("Asks(%s) = %v; want %v", node, got, want)
		}
	}
	st := p.Status()
	byJob := map[string]api.PrefetchStatus{}
	for _, s := range st.Jobs {
		byJob[s.Job] = s
	}
	if len(st.Jobs) != 5 {
		t.Errorf("status lists %d jobs; want 5 (the job naming no model is not watched)", len(st.Jobs))
	}
	if s := byJob["1"]; s.State != api.PlanAsked || !slices.Equal(s.NodeStates, []string{"n1=asked", "n2=holds"}) {
		t.Errorf("job 1: %+v; want asked, n1 asked and n2 holding", s)
	}
	if s := byJob["2"]; s.Why == "" || !slices.Equal(s.NodeStates, []string{"n1=over-budget"}) {
		t.Errorf("job 2: %+v; want over budget on n1", s)
	}
	if s := byJob["3"]; s.State != api.PlanHeld {
		t.Errorf("job 3: %+v; want held beyond the horizon", s)
	}
	if s := byJob["4"]; s.State != api.PlanHeld {
		t.Errorf("job 4: %+v; want held (a path is never fetched)", s)
	}
	if st.Jobs[0].Job != "1" || st.Jobs[len(st.Jobs)-1].Job != "3" {
		t.Errorf("status order %v; want the earliest start first", st.Jobs)
	}
}

func TestJobThatLeavesTheQueueDropsItsAsks(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	plan := []slurm.PendingJob{pj("7", "m1", t0, "n1")}
	p, _, _, _ := newTest(t, Config{}, plan, plan, nil)
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx)
	p.Read(ctx)
	if got := askModels(p.Asks("n1")); len(got) != 0 {
		t.Fatalf("after the job left the queue Asks(n1) = %v; want none", got)
	}
}

func TestFailedReadKeepsTheAsks(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	plan := []slurm.PendingJob{pj("7", "m1", t0, "n1")}
	p, _, _, _ := newTest(t, Config{}, plan, plan)
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx)
	p.Read(ctx) // fails: no more reads
	if got := askModels(p.Asks("n1")); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("after a failed read Asks(n1) = %v; want [m1] kept", got)
	}
	if st := p.Status(); st.Error == "" {
		t.Error("status does not say the read failed")
	}
}

func TestStartsCountedWarmOnlyWhenEveryNodeWasWarm(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	p, _, _, now := newTest(t, Config{},
		[]slurm.PendingJob{pj("7", "m1", t0, "n1", "n2"), pj("8", "m1", t0, "n3", "n4")}, nil)
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx) // both left the queue: started
	p.Observe("n1", &api.Report{Starts: []api.JobStart{{Job: "7", Model: "m1", Warm: true}}})
	if st := p.Status(); st.WarmStarts+st.ColdStarts != 0 {
		t.Fatalf("a two-node job was counted after one node reported: %+v", st)
	}
	p.Observe("n2", &api.Report{Starts: []api.JobStart{{Job: "7", Model: "m1", Warm: true}}})
	p.Observe("n3", &api.Report{Starts: []api.JobStart{{Job: "8", Model: "m1", Warm: true}}})
	p.Observe("n4", &api.Report{Starts: []api.JobStart{{Job: "8", Model: "m1", Warm: false}}})
	// A job never seen pending: counted once it has had time to hear all.
	p.Observe("n1", &api.Report{Starts: []api.JobStart{{Job: "9", Model: "m1", Warm: true}}})
	st := p.Status()
	if st.WarmStarts != 1 || st.ColdStarts != 1 {
		t.Fatalf("warm %d cold %d; want 1 and 1 before job 9 settles", st.WarmStarts, st.ColdStarts)
	}
	*now = now.Add(startSettle)
	st = p.Status()
	if st.WarmStarts != 2 || st.ColdStarts != 1 {
		t.Fatalf("warm %d cold %d; want 2 and 1 once job 9 settled", st.WarmStarts, st.ColdStarts)
	}
}

func TestCallsAtMostOnePerRead(t *testing.T) {
	plan := []slurm.PendingJob{pj("7", "m1", time.Unix(1_800_000_600, 0), "n1")}
	p, fs, _, _ := newTest(t, Config{}, plan, plan, plan)
	fs.conf = slurm.Config{"schedulertype": "sched/backfill", "schedulerparameters": "bf_interval=7"}
	ctx := context.Background()
	p.readConfig(ctx)
	for range 3 {
		p.Read(ctx)
	}
	if fs.calls != 4 {
		t.Errorf("slurmctld was called %d times for one config read and three plan reads; want 4", fs.calls)
	}
	if st := p.Status(); st.Interval != 7 || st.CallsPerMinute != 4 {
		t.Errorf("status: interval %v, calls per minute %d; want 7 and 4", st.Interval, st.CallsPerMinute)
	}
	if got := testutil.ToFloat64(p.metrics.calls); got != 4 {
		t.Errorf("calls metric %v; want 4", got)
	}
}

func TestCheckReport(t *testing.T) {
	good := &api.Report{Prefetches: []api.PrefetchState{{Model: "m1", Source: "http://o/m1", State: api.PrefetchFetching}},
		Starts: []api.JobStart{{Job: "12_3", Model: "m1"}}}
	if err := CheckReport(good); err != nil {
		t.Fatalf("CheckReport(good) = %v", err)
	}
	for name, r := range map[string]*api.Report{
		"bad job":   {Starts: []api.JobStart{{Job: "../x"}}},
		"negative":  {Prefetches: []api.PrefetchState{{Done: -1}}},
		"too many":  {Prefetches: make([]api.PrefetchState, 65)},
		"neg bytes": {PrefetchBytes: &api.PrefetchBytes{Fetched: -1}},
	} {
		if err := CheckReport(r); err == nil {
			t.Errorf("CheckReport(%s) accepted it", name)
		}
	}
	odd := &api.Report{Prefetches: []api.PrefetchState{{State: "weird"}}}
	if err := CheckReport(odd); err != nil || odd.Prefetches[0].State != "unknown" {
		t.Errorf("an unknown state: %v, %q; want kept as unknown", err, odd.Prefetches[0].State)
	}
}

func TestMetricsLint(t *testing.T) {
	p, _, _, _ := newTest(t, Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.metrics.collectors()...)
	probs, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range probs {
		t.Errorf("metric %s: %s", pr.Metric, pr.Text)
	}
}

func TestWarmHoldsUntilNodesHoldOrTheBound(t *testing.T) {
	t0 := time.Unix(1_800_000_600, 0)
	plan := []slurm.PendingJob{pj("7", "m1", t0, "n1", "n2")}
	p, _, fp, now := newTest(t, Config{WarmMax: time.Minute}, plan, plan)
	ctx := context.Background()
	p.Read(ctx)
	p.Read(ctx)
	if a := p.Warm("7", "", ""); a.Ready || a.Nodes != "n[1-2]" || a.Model != "m1" {
		t.Fatalf("Warm(7) with no node holding m1 = %+v; want wait on n[1-2]", a)
	}
	fp.holds["n1"] = []string{"m1"}
	if a := p.Warm("7", "", ""); a.Ready {
		t.Fatalf("Warm(7) with n2 lacking m1 = %+v; want wait", a)
	}
	fp.holds["n2"] = []string{"m1"}
	if a := p.Warm("7", "", ""); !a.Ready {
		t.Fatalf("Warm(7) with both holding = %+v; want ready", a)
	}
	// The caller's nodes win (burst_buffer.lua's job_info): n3 lacks it.
	if a := p.Warm("7", "", "n3"); a.Ready {
		t.Fatalf("Warm(7, nodes n3) = %+v; want wait", a)
	}
	*now = now.Add(time.Minute)
	if a := p.Warm("7", "", "n3"); !a.Ready || a.Waited < 60 {
		t.Fatalf("Warm(7) after the bound = %+v; want ready", a)
	}
	if a := p.Warm("97", "", ""); a.Ready {
		t.Errorf("Warm of a job not read yet = %+v; want wait (within the bound)", a)
	}
	for _, c := range []struct{ job, model string }{{"99", "nosuch"}, {"99", "p"}} {
		if a := p.Warm(c.job, c.model, ""); !a.Ready {
			t.Errorf("Warm(%s, %q) = %+v; want ready (nothing to wait for)", c.job, c.model, a)
		}
	}
	if a := p.Warm("98", "m1", ""); a.Ready || a.Why != "no plan from backfill yet" {
		t.Errorf("Warm of a job without a plan = %+v; want wait for a plan", a)
	}
}
