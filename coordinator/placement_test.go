package coordinator

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestPlacement ranks over real reports through the real HTTP API: the
// answer carries, per node, what `llmgw sbatch` needs (holder, no room),
// and Slurm states given by the reconciler take drained holders out.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute}, testTokens)
	const src = "hf:org/repo/llama.gguf"
	for _, m := range []api.Model{
		{Name: "llama", Source: src, Size: 100e9, GPUMemory: 40e9},
		{Name: "local-only", Source: "/lustre/x"},
	} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	cached := api.Weight{Path: catalog.CachePathFor("/var/cache/llmgw", src), Size: 100e9, Complete: true}
	post := func(r *api.Report) {
		t.Helper()
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// ib-a: n1 holds it, n2 has room, n3 lacks room. ib-b: n4 holds it
	// with too little GPU memory, n5 and n6 have room and 80 GB GPUs.
	n1 := report("n1", "ib-a", 1, cached)
	n3 := report("n3", "ib-a", 1)
	n3.Cache.FreeBytes = 10e9
	n4 := report("n4", "ib-b", 1, cached)
	n4.GPUMemory = 24e9
	n5, n6 := report("n5", "ib-b", 1), report("n6", "ib-b", 1)
	n5.GPUMemory, n6.GPUMemory = 80e9, 80e9
	for _, r := range []*api.Report{n1, report("n2", "ib-a", 1), n3, n4, n5, n6} {
		post(r)
	}

	p, err := e.anon.Placement(ctx, api.PlacementQuery{Model: "llama"})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		tier           string
		holder, noRoom bool
		memory, disk   string
	}
	got := map[string]row{}
	var order []string
	for _, n := range p.Nodes {
		got[n.Node] = row{n.Tier, n.Holder, n.NoRoom, n.Memory.Result, n.Disk.Result}
		order = append(order, n.Node)
		if n.Reason == "" || n.Memory.Reason == "" || n.Disk.Reason == "" {
			t.Errorf("%s lacks a reason: %+v", n.Node, n)
		}
	}
	want := map[string]row{
		"n1": {api.TierHoldsLocal, true, false, api.CheckSkip, api.CheckSkip},
		"n2": {api.TierHasRoom, false, false, api.CheckSkip, api.CheckPass},
		"n3": {api.TierNoRoom, false, true, api.CheckSkip, api.CheckFail},
		"n4": {api.TierGPUMemory, true, false, api.CheckFail, api.CheckSkip},
		"n5": {api.TierHasRoom, false, false, api.CheckPass, api.CheckPass},
		"n6": {api.TierHasRoom, false, false, api.CheckPass, api.CheckPass},
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s = %+v, want %+v", n, got[n], w)
		}
	}
	if strings.Join(order, " ") != "n1 n2 n5 n6 n3 n4" || strings.Join(p.Choice, ",") != "n1" || p.FetchBytes != 100e9 {
		t.Errorf("order %v, choice %v, fetch %d", order, p.Choice, p.FetchBytes)
	}

	// The GPU memory is stored: after a reload from the database, n4 still
	// fails the memory check.
	if err := e.srv.view.load(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if p, err := e.anon.Placement(ctx, api.PlacementQuery{Model: "llama", Nodes: "n4"}); err != nil || p.Nodes[0].Memory.Result != api.CheckFail || p.Nodes[0].Memory.HaveBytes != 24e9 {
		t.Errorf("n4 after a reload = %+v, %v", p, err)
	}

	// Two nodes, restricted to a hostlist that names a node nobody has
	// heard of: ib-b has two usable nodes, ib-a two and a holder.
	p, err = e.anon.Placement(ctx, api.PlacementQuery{Model: "llama", Count: 2, Nodes: "n[1-3,5-6],x9"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Choice, ",") != "n1,n2" || p.Fabrics[0].Fabric != "ib-a" || len(p.Nodes) != 6 {
		t.Errorf("2 nodes: choice %v, fabrics %+v", p.Choice, p.Fabrics)
	}
	for _, n := range p.Nodes {
		if n.Node == "x9" && (n.State != api.NodeUnreported || n.Tier != api.TierUnchecked || n.Fabric != "") {
			t.Errorf("x9 = %+v; want an unreported candidate", n)
		}
	}

	// The reconciler read Slurm: n1 is drained. It holds the model but is
	// no holder, and ib-a no longer serves it, so ib-b goes first.
	e.srv.SetSlurmStates(map[string]string{"n1": "drained", "n2": "idle"})
	p, err = e.anon.Placement(ctx, api.PlacementQuery{Model: "llama", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if p.Fabrics[0].Fabric != "ib-b" || strings.Join(p.Choice, ",") != "n5,n6" {
		t.Errorf("with n1 drained: fabrics %+v, choice %v; want ib-b's n5,n6", p.Fabrics, p.Choice)
	}
	for _, n := range p.Nodes {
		if n.Node == "n1" && (n.Holder || n.Tier != api.TierUnschedulable || n.SlurmState != "drained") {
			t.Errorf("drained n1 = %+v", n)
		}
	}
	// A new report does not forget what Slurm said.
	n1.Seq = 2
	post(n1)
	p, _ = e.anon.Placement(ctx, api.PlacementQuery{Model: "llama", Nodes: "n1"})
	if p.Nodes[0].Tier != api.TierUnschedulable {
		t.Errorf("after a new report n1 = %+v", p.Nodes[0])
	}

	// The reconciler's view of the same state: features follow presence,
	// drained or not; a stale node carries none.
	feats, _ := e.srv.desiredFeatures(e.clock.now(), time.Time{})
	if strings.Join(feats["n1"], ",") != "llmgw.llama" || strings.Join(feats["n4"], ",") != "llmgw.llama" || len(feats["n2"]) != 0 {
		t.Errorf("features = %v", feats)
	}
	if feats, _ := e.srv.desiredFeatures(e.clock.now().Add(time.Hour), time.Time{}); len(feats["n1"]) != 0 {
		t.Errorf("an hour later n1 is stale and still carries %v", feats["n1"])
	}

	// Nobody holds a path source: no refusal, and the note says why.
	p, err = e.anon.Placement(ctx, api.PlacementQuery{Model: "local-only"})
	if err != nil || len(p.Nodes) != 6 || !strings.Contains(p.Note, "path source is never fetched") {
		t.Errorf("local-only: %+v, %v", p, err)
	}

	for _, tc := range []struct {
		query string
		code  int
		msg   string
	}{
		{"", http.StatusBadRequest, "needs a model"},
		{"model=bad,name", http.StatusBadRequest, "model name"},
		{"model=nope", http.StatusNotFound, "not in the catalog"},
		{"model=llama&count=0", http.StatusBadRequest, "count"},
		{"model=llama&count=x", http.StatusBadRequest, "count"},
		{"model=llama&nodes=n[1-", http.StatusBadRequest, "hostlist"},
		{"model=llama&nodes=a/b", http.StatusBadRequest, "node name"},
	} {
		err := e.anon.Do(ctx, http.MethodGet, "/v1/placement?"+tc.query, nil, nil)
		if status, _ := apiCode(err); status != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: %v (status %d), want %d with %q", tc.query, err, status, tc.code, tc.msg)
		}
	}
}
