package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/prefetch"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

type planSlurm struct{ jobs []slurm.PendingJob }

func (p *planSlurm) PendingPlans(context.Context) ([]slurm.PendingJob, error) { return p.jobs, nil }
func (p *planSlurm) ShowConfig(context.Context) (slurm.Config, error)         { return slurm.Config{}, nil }

// TestPrefetchRidesOnReportAnswers: the prefetcher's asks reach the
// planned nodes that lack the model in the answers to their reports, and
// only them; a node that holds it is not asked; status shows the job; a
// node's reported job starts are counted.
func TestPrefetchRidesOnReportAnswers(t *testing.T) {
	e, sn := seedEnv(t)
	s := e.srv
	ps := &planSlurm{jobs: []slurm.PendingJob{{ID: "42", Model: "big", Nodes: []string{"n1", "n2"}, NumNodes: 2, Start: seedT0.Add(5 * time.Minute)}}}
	s.prefetch = prefetch.New(prefetch.Config{Interval: time.Second, ReportInterval: 30 * time.Second}, ps, prefetchView{s}, s.log, prometheus.NewRegistry())
	ctx := context.Background()
	s.prefetch.Read(ctx)
	if ans := sn.post("n2", false); ans.Prefetch != nil {
		t.Fatalf("after one read n2's answer carries %+v; want no word", ans.Prefetch)
	}
	s.prefetch.Read(ctx)
	ans := sn.post("n2", false)
	if ans.Prefetch == nil || len(ans.Prefetch.Asks) != 1 || ans.Prefetch.Asks[0].Source != seedSrc || ans.Prefetch.Asks[0].Jobs[0] != "42" {
		t.Fatalf("n2's answer: %+v; want an ask for big for job 42", ans.Prefetch)
	}
	if ans.Prefetch.Lease != 90 {
		t.Errorf("lease %v s; want three report intervals", ans.Prefetch.Lease)
	}
	if ans := sn.post("n1", true); ans.Prefetch == nil || len(ans.Prefetch.Asks) != 0 {
		t.Errorf("n1 holds big; its answer: %+v, want an empty list", ans.Prefetch)
	}
	if ans := sn.post("n3", false); ans.Prefetch == nil || len(ans.Prefetch.Asks) != 0 {
		t.Errorf("n3 is not planned; its answer: %+v, want an empty list", ans.Prefetch)
	}
	st, err := e.anon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Prefetch == nil || len(st.Prefetch.Jobs) != 1 || st.Prefetch.Jobs[0].Nodes != "n[1-2]" || st.Prefetch.Jobs[0].State != api.PlanAsked {
		t.Fatalf("status prefetch: %+v; want job 42 asked on n[1-2]", st.Prefetch)
	}
	// The job starts: both nodes report a warm start.
	ps.jobs = nil
	s.prefetch.Read(ctx)
	for _, n := range []string{"n1", "n2"} {
		sn.seq[n]++
		r := report(n, "ib-a", sn.seq[n])
		r.Time = e.clock.now()
		r.Starts = []api.JobStart{{Job: "42", Model: "big", Warm: true, Time: r.Time}}
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := e.anon.Status(ctx); st.Prefetch.WarmStarts != 1 || st.Prefetch.ColdStarts != 0 {
		t.Errorf("starts: warm %d cold %d; want one warm", st.Prefetch.WarmStarts, st.Prefetch.ColdStarts)
	}
}

// TestPrefetchAsksForSetsAndHubModels: a model of several files and a Hub
// repository are asked of planned nodes like a model of one file, by name
// and source, with the whole model's size (what prefetch_max_bytes
// counts); a set whose sizes the catalog lacks is asked with none (and so
// is cut by a prefetch_max_bytes). Before, a set was held back ("not
// prefetched yet"); a Hub model was asked, and its agent failed it (see
// agent's TestPrefetchAHubModelAndASet).
func TestPrefetchAsksForSetsAndHubModels(t *testing.T) {
	e, sn := seedEnv(t)
	s := e.srv
	ctx := context.Background()
	hb := catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: strings.Repeat("c", 40), Files: []catalog.HubFile{
		{Path: "config.json", Size: 2, Blob: strings.Repeat("b", 40)},
		{Path: "model.safetensors", Size: 5000, SHA256: strings.Repeat("a", 64)},
	}}
	pair := api.Model{Name: "pair", Files: []api.File{{Source: "https://origin.example/m/p-00001-of-00002.gguf", Size: 300}, {Source: "https://origin.example/m/p-00002-of-00002.gguf", Size: 200}}}
	for _, m := range []api.Model{pair, {Name: "tiny", Hub: &hb}} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	start := seedT0.Add(5 * time.Minute)
	ps := &planSlurm{jobs: []slurm.PendingJob{
		{ID: "51", Model: "pair", Nodes: []string{"n2"}, NumNodes: 1, Start: start},
		{ID: "52", Model: "tiny", Nodes: []string{"n2"}, NumNodes: 1, Start: start.Add(time.Minute)},
		{ID: "53", Model: "split", Nodes: []string{"n2"}, NumNodes: 1, Start: start.Add(2 * time.Minute)},
	}}
	s.prefetch = prefetch.New(prefetch.Config{Interval: time.Second, ReportInterval: 30 * time.Second, MaxBytes: -1}, ps, prefetchView{s}, s.log, prometheus.NewRegistry())
	s.prefetch.Read(ctx)
	s.prefetch.Read(ctx)
	ans := sn.post("n2", false)
	if ans.Prefetch == nil {
		t.Fatal("n2's answer carries no prefetch list")
	}
	got := map[string]api.PrefetchAsk{}
	for _, a := range ans.Prefetch.Asks {
		got[a.Model] = a
	}
	for name, want := range map[string]api.PrefetchAsk{
		"pair":  {Source: pair.Files[0].Source, Size: 500},
		"tiny":  {Source: catalog.HubSource(hb.Repo, hb.Commit), Size: 5002},
		"split": {Source: "https://origin.example/m/s-00001-of-00002.gguf", Size: 0},
	} {
		a, ok := got[name]
		if !ok || a.Source != want.Source || a.Size != want.Size || a.SHA256 != "" {
			t.Errorf("n2's ask for %s: %+v (asked: %v); want source %s, size %d, no sha256", name, a, ok, want.Source, want.Size)
		}
	}
}
