package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
)

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/lustre/llama"}); err != nil {
		t.Fatal(err)
	}
	shared := api.Weight{Path: "/lustre/llama", Shared: true, Complete: true}
	local := api.Weight{Path: "/lustre/llama", Complete: true}
	post := func(r *api.Report) {
		t.Helper()
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	post(report("old1", "ib-a", 1, shared)) // goes stale below
	e.clock.set(t0.Add(time.Minute))
	post(report("n1", "ib-a", 1, shared))
	post(report("n2", "ib-a", 1, shared))
	post(report("n3", "ib-b", 1, local))
	blind := report("n4", "ib-b", 1)
	blind.Looked = false
	post(blind)
	f := report("n5", "ib-b", 1)
	f.Fetches = []api.Fetch{{Source: "/lustre/llama", Done: 100, Total: 1000, Started: t0, Progressed: t0}}
	post(f)
	f = report("n5", "ib-b", 2)
	f.Fetches = []api.Fetch{{Source: "/lustre/llama", Done: 400, Total: 1000, Started: t0, Progressed: t0}}
	post(f)
	post(report("n1", "ib-a", 1, shared))                                   // dropped: not newer
	e.anon.PostReport(ctx, report("n6", "ib-a", 1))                         // unauthorized
	e.agent.PostReport(ctx, report("n7", "ib-a", 1, api.Weight{Path: "x"})) // invalid

	reg := e.srv.metrics.reg
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}

	for _, tc := range []struct {
		result string
		want   float64
	}{{"stored", 7}, {"dropped", 1}, {"invalid", 1}, {"error", 0}} {
		if got := testutil.ToFloat64(e.srv.metrics.reports.WithLabelValues(tc.result)); got != tc.want {
			t.Errorf("reports_total{result=%q} = %v, want %v", tc.result, got, tc.want)
		}
	}
	// n5's fetch advanced by 300 bytes between its two reports; its first
	// report is the coordinator's first sight of the node and counts nothing.
	if got := testutil.ToFloat64(e.srv.metrics.fetched); got != 300 {
		t.Errorf("fetched_bytes_total = %v, want 300", got)
	}

	want := `
# HELP llmgw_coordinator_fetches_in_progress Fetches of catalog models that fresh nodes report in progress.
# TYPE llmgw_coordinator_fetches_in_progress gauge
llmgw_coordinator_fetches_in_progress 1
# HELP llmgw_coordinator_model_holders Fresh nodes holding a complete copy of a catalog model, per fabric and kind (shared filer or local copy).
# TYPE llmgw_coordinator_model_holders gauge
llmgw_coordinator_model_holders{fabric="ib-a",kind="local",model="llama"} 0
llmgw_coordinator_model_holders{fabric="ib-a",kind="shared",model="llama"} 2
llmgw_coordinator_model_holders{fabric="ib-b",kind="local",model="llama"} 1
llmgw_coordinator_model_holders{fabric="ib-b",kind="shared",model="llama"} 0
# HELP llmgw_coordinator_nodes Nodes the coordinator has heard from, by state (ok, stale, never-looked).
# TYPE llmgw_coordinator_nodes gauge
llmgw_coordinator_nodes{state="never-looked"} 1
llmgw_coordinator_nodes{state="ok"} 4
llmgw_coordinator_nodes{state="stale"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"llmgw_coordinator_nodes", "llmgw_coordinator_model_holders", "llmgw_coordinator_fetches_in_progress"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(e.srv.metrics.latency); n == 0 {
		t.Error("no request latency recorded")
	}

	// No label value is a node name or a path: those belong in status.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if strings.HasPrefix(v, "/lustre") || strings.HasPrefix(v, "n1") || strings.HasPrefix(v, "old") {
					t.Errorf("%s has label %s=%q", mf.GetName(), l.GetName(), v)
				}
			}
		}
	}
}
