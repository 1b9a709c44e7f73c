package coordinator

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

var seedT0 = time.Now().UTC().Truncate(time.Second)

const (
	seedSrc  = "https://origin.example/m/big.gguf"
	seedSize = int64(100e9)
	seedSHA  = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// seedEnv is a coordinator with model "big" (remote, pinned, 100 GB) in
// its catalog and nodes n1-n4 in ib-a and m1 in ib-b: n1 holds big, n4 has
// too little cache room for it, the others 500 GB free.
func seedEnv(t *testing.T) (*testEnv, *seedNodes) {
	t.Helper()
	e := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute}, testTokens)
	// The clock starts now, not at t0: a coordinator started over the same
	// database (a restart) loads the requests whose deadline is after the
	// real time.
	e.clock.set(seedT0)
	ctx := context.Background()
	for _, m := range []api.Model{
		{Name: "big", Source: seedSrc, SHA256: seedSHA, Size: seedSize},
		{Name: "unpinned", Source: "https://origin.example/m/u.gguf"},
		{Name: "onfiler", Source: "/lustre/models/x.gguf"},
		{Name: "split", Files: []api.File{{Source: "https://origin.example/m/s-00001-of-00002.gguf"}, {Source: "https://origin.example/m/s-00002-of-00002.gguf"}}},
	} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sn := &seedNodes{t: t, e: e, seq: map[string]int64{}}
	for _, n := range []string{"n1", "n2", "n3", "n4", "m1"} {
		sn.post(n, false)
	}
	return e, sn
}

// seedNodes posts the nodes' reports, each newer than the last, as their
// agents would, and returns the coordinator's answers.
type seedNodes struct {
	t   *testing.T
	e   *testEnv
	seq map[string]int64
}

func (sn *seedNodes) post(node string, holds bool) api.ReportAnswer {
	sn.t.Helper()
	sn.seq[node]++
	fabric := "ib-a"
	if strings.HasPrefix(node, "m") {
		fabric = "ib-b"
	}
	r := report(node, fabric, sn.seq[node])
	r.Time = sn.e.clock.now()
	if node == "n4" {
		r.Cache.FreeBytes = 10e9
	}
	if fabric == "ib-a" {
		r.PeerAddr = "127.0.0.1:4000" + node[1:]
	}
	if holds || node == "n1" {
		r.Weights = append(r.Weights, api.Weight{Path: catalog.CachePathFor(r.Cache.Dir, seedSrc), Size: seedSize, Complete: true})
	}
	ans, err := sn.e.agent.PostReport(context.Background(), r)
	if err != nil {
		sn.t.Fatal(err)
	}
	if ans.Result != "stored" {
		sn.t.Fatalf("report of %s: %s", node, ans.Result)
	}
	return ans
}

func seedStates(st api.SeedStatus) string {
	var parts []string
	for _, n := range st.Nodes {
		parts = append(parts, n.Node+" "+n.State)
	}
	return strings.Join(parts, ", ")
}

// TestSeedAsksUntilHeld: a seed request for three copies in ib-a counts
// n1, which holds the model, and asks two nodes with room (never n4, whose
// cache is too small, never m1 of ib-b). Each asked node gets the ask in
// the answer to every report until it reports holding the model; the asks
// survive a restart of the coordinator over the same database file, and
// stop at the deadline.
func TestSeedAsksUntilHeld(t *testing.T) {
	ctx := context.Background()
	e, sn := seedEnv(t)
	st, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: 3, AskFor: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seedStates(st), "n1 held, n2 asked, n3 asked"; got != want || st.Copies != 3 || st.Note != "" {
		t.Fatalf("seed = %s (copies %d, note %q), want %s", got, st.Copies, st.Note, want)
	}
	if !st.Deadline.Equal(seedT0.Add(time.Hour)) {
		t.Errorf("deadline %v, want an hour after %v", st.Deadline, seedT0)
	}
	want := api.SeedAsk{Model: "big", Source: seedSrc, SHA256: seedSHA, Size: seedSize}
	for _, n := range []string{"n1", "n4", "m1"} {
		if ans := sn.post(n, false); len(ans.Seed) != 0 {
			t.Errorf("%s was asked %+v", n, ans.Seed)
		}
	}
	for range 2 {
		ans := sn.post("n2", false)
		if len(ans.Seed) != 1 || ans.Seed[0] != want {
			t.Fatalf("n2's answer asks %+v, want %+v at every report", ans.Seed, want)
		}
	}
	e.clock.set(seedT0.Add(time.Minute))
	if ans := sn.post("n2", true); len(ans.Seed) != 0 {
		t.Errorf("n2 reports holding big and is still asked %+v", ans.Seed)
	}
	if ans := sn.post("n2", false); len(ans.Seed) != 0 {
		t.Errorf("n2 is asked again after it reported holding big: %+v", ans.Seed)
	}
	got, err := e.anon.SeedStatus(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s := seedStates(got); s != "n1 held, n2 done, n3 asked" || !got.Nodes[1].Handed.Equal(seedT0) || !got.Nodes[1].Done.Equal(seedT0.Add(time.Minute)) {
		t.Errorf("seed status = %s, n2 handed %v done %v", s, got.Nodes[1].Handed, got.Nodes[1].Done)
	}
	status, err := e.anon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.Seeds) != 1 || seedStates(status.Seeds[0]) != "n3 asked" {
		t.Errorf("status seeds = %+v, want the request asking n3", status.Seeds)
	}

	// A new coordinator process over the same file asks n3 still.
	e.srv.Close()
	srv, err := New(ctx, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute}, testTokens, e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.now = e.clock.now
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close() })
	e.srv, e.url = srv, ts.URL
	e.agent = &api.Client{BaseURL: ts.URL, Auth: e.agent.Auth}
	if ans := sn.post("n3", false); len(ans.Seed) != 1 || ans.Seed[0] != want {
		t.Fatalf("after a restart n3's answer asks %+v, want %+v", ans.Seed, want)
	}
	if ans := sn.post("n2", false); len(ans.Seed) != 0 {
		t.Errorf("after a restart n2, done, is asked %+v", ans.Seed)
	}

	e.clock.set(seedT0.Add(time.Hour))
	if ans := sn.post("n3", false); len(ans.Seed) != 0 {
		t.Errorf("n3 is asked after the deadline: %+v", ans.Seed)
	}
	got, _ = e.client("").SeedStatus(ctx, st.ID)
	if s := seedStates(got); s != "n1 held, n2 done, n3 expired" {
		t.Errorf("after the deadline: %s", s)
	}
}

// TestSeedNodesAndCopies: --nodes names the nodes itself (a holder among
// them is not asked), copies prefers nodes with room and counts holders,
// and a request that holders already satisfy asks nobody.
func TestSeedNodesAndCopies(t *testing.T) {
	ctx := context.Background()
	e, sn := seedEnv(t)
	st, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n[1,3]"})
	if err != nil {
		t.Fatal(err)
	}
	if s := seedStates(st); s != "n1 held, n3 asked" || st.Copies != 2 {
		t.Errorf("--nodes n[1,3]: %s, copies %d", s, st.Copies)
	}
	if ans := sn.post("n2", false); len(ans.Seed) != 0 {
		t.Errorf("n2, not named, is asked %+v", ans.Seed)
	}
	// One copy: n1 holds it; nothing to ask.
	st, err = e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a"})
	if err != nil {
		t.Fatal(err)
	}
	if s := seedStates(st); s != "n1 held" || st.Copies != 1 || st.Pending() {
		t.Errorf("one copy: %s, copies %d", s, st.Copies)
	}
	// n3 is asked by the first request: two copies prefer it to n2.
	st, err = e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := seedStates(st); s != "n1 held, n3 asked" {
		t.Errorf("two copies with n3 asked already: %s, want n3 again", s)
	}
	// Two requests ask n3 for one model: one ask in its answer.
	if ans := sn.post("n3", false); len(ans.Seed) != 1 {
		t.Errorf("n3's answer asks %+v, want the one model once", ans.Seed)
	}
	// An unpinned model: seeded, with a note that says what it costs.
	st, err = e.admin.Seed(ctx, api.SeedRequest{Model: "unpinned", Fabric: "ib-b"})
	if err != nil {
		t.Fatal(err)
	}
	if s := seedStates(st); s != "m1 asked" || !strings.Contains(st.Note, "no pinned sha256 and size") || !strings.Contains(st.Note, "m1 reported no chunk server address") {
		t.Errorf("unpinned: %s, note %q", s, st.Note)
	}
	if ans := sn.post("m1", false); len(ans.Seed) != 1 || ans.Seed[0].SHA256 != "" || ans.Seed[0].Source != "https://origin.example/m/u.gguf" {
		t.Errorf("m1's answer asks %+v", ans.Seed)
	}
	// The model leaves the catalog: the request stops asking.
	if err := e.admin.DeleteModel(ctx, "unpinned"); err != nil {
		t.Fatal(err)
	}
	if ans := sn.post("m1", false); len(ans.Seed) != 0 {
		t.Errorf("m1 is asked for a model no longer in the catalog: %+v", ans.Seed)
	}
}

// TestSeedRefusals: every request the coordinator cannot carry out is
// refused with the thing named and what to do.
func TestSeedRefusals(t *testing.T) {
	ctx := context.Background()
	e, sn := seedEnv(t)
	e.clock.set(seedT0.Add(2 * time.Minute))
	for _, n := range []string{"n1", "n2", "n3", "m1"} {
		sn.post(n, false) // n4 goes stale: no report since seedT0
	}
	for _, tc := range []struct {
		name string
		req  api.SeedRequest
		code int
		want []string
	}{
		{"not in the catalog", api.SeedRequest{Model: "nope", Fabric: "ib-a"}, 404, []string{"model nope is not in the catalog", "llmgw models add"}},
		{"bad model name", api.SeedRequest{Model: "a,b", Fabric: "ib-a"}, 400, []string{"a,b"}},
		{"a path", api.SeedRequest{Model: "onfiler", Fabric: "ib-a"}, 400, []string{"never fetched"}},
		{"a model of several files", api.SeedRequest{Model: "split", Fabric: "ib-a"}, 400, []string{"model split is made of 2 files", "not built yet"}},
		{"no fabric", api.SeedRequest{Model: "big"}, 400, []string{"names no fabric"}},
		{"unknown fabric", api.SeedRequest{Model: "big", Fabric: "ib-z"}, 404, []string{"fabric ib-z has no node", "fabrics known: ib-a, ib-b"}},
		{"both", api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: 2, Nodes: "n2"}, 400, []string{"not both"}},
		{"negative copies", api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: -1}, 400, []string{"at least 1"}},
		{"more copies than nodes", api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: 5}, 400, []string{"fabric ib-a has 4 nodes; copies must be 1-4"}},
		{"more copies than can fetch", api.SeedRequest{Model: "big", Fabric: "ib-a", Copies: 4}, 409,
			[]string{"fabric ib-a cannot hold 4 copies of big: 1 of its nodes hold it and 2 can fetch it", "n4: no report for 2m0s"}},
		{"another fabric's node", api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n2,m1"}, 409, []string{"m1: not a node of fabric ib-a"}},
		{"an unknown node", api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n9"}, 409, []string{"n9: not a node of fabric ib-a that reported"}},
		{"a stale node", api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n4"}, 409, []string{"n4: no report for 2m0s; its agent must be running"}},
		{"a bad hostlist", api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n[1-"}, 400, []string{"nodes:"}},
		{"ask for too long", api.SeedRequest{Model: "big", Fabric: "ib-a", AskFor: 2 * 86400}, 400, []string{"ask_for_seconds"}},
	} {
		_, err := e.admin.Seed(ctx, tc.req)
		code, _ := apiCode(err)
		if code != tc.code {
			t.Errorf("%s: %v (status %d), want status %d", tc.name, err, code, tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
	// No room: n4 reports again, with 10 GB free for a 100 GB model.
	sn.post("n4", false)
	if _, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n4"}); err == nil ||
		!strings.Contains(err.Error(), "n4: 10 GB free in its cache, the model is 100 GB") {
		t.Errorf("n4 without room: %v", err)
	}
	// A node Slurm does not list runs no job.
	e.srv.view.setSlurmStates(map[string]string{"n1": "idle", "n2": "idle", "n4": "idle", "m1": "idle"})
	if _, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n3"}); err == nil ||
		!strings.Contains(err.Error(), "n3: not in Slurm's node list") {
		t.Errorf("n3 outside Slurm's list: %v", err)
	}
	// Only admins seed.
	for name, c := range map[string]*api.Client{"anonymous": e.anon, "a node's token": e.nodeClient(t, "n2")} {
		if _, err := c.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n2"}); err == nil {
			t.Errorf("%s seeded", name)
		} else if code, _ := apiCode(err); code != 401 {
			t.Errorf("%s: %v, want 401", name, err)
		}
	}
	// Bounded: maxPendingSeeds requests asking, then no more.
	for i := range maxPendingSeeds {
		if _, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n2"}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err := e.admin.Seed(ctx, api.SeedRequest{Model: "big", Fabric: "ib-a", Nodes: "n2"})
	if code, _ := apiCode(err); code != 409 || !strings.Contains(err.Error(), fmt.Sprintf("%d seed requests are asking", maxPendingSeeds)) {
		t.Errorf("request %d: %v, want 409", maxPendingSeeds+1, err)
	}
	if _, err := e.anon.SeedStatus(ctx, "../x"); err == nil {
		t.Error("a malformed id was looked up")
	}
}
