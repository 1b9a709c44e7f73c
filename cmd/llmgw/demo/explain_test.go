package demo

import (
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

func TestExplainStatus(t *testing.T) {
	path := api.Model{Name: "llama", Source: "/filer/llama.gguf"}
	remote := api.Model{Name: "mistral", Source: "http://127.0.0.1:1/m.gguf"}
	st := &api.Status{
		StaleAfter: 6,
		Fabrics:    []api.FabricNodes{{Fabric: "ib-a"}, {Fabric: "ib-b", Stale: "n4", NeverLooked: "n[5-6]"}},
		Models: []api.ModelStatus{
			{Model: path, Fabrics: []api.FabricPresence{
				{Fabric: "ib-a", Serve: api.HoldShared, SharedNodes: 2, Holders: "n[1-2]"},
				{Fabric: "ib-b", Serve: api.HoldNone},
			}},
			{Model: remote, Fabrics: []api.FabricPresence{
				{Fabric: "ib-a", Serve: api.HoldLocal, LocalNodes: 1, Holders: "n1"},
				{Fabric: "ib-b", Serve: api.HoldNone, Fetchable: true, FetchBytes: 134_000_000,
					Fetching: []api.FetchStatus{{Node: "n3", Percent: 40, Rate: 2e6}}},
			}},
		},
	}
	got := ExplainStatus(st)
	want := []string{
		"llama in ib-a: on a shared filer seen by 2 nodes (n[1-2])",
		"llama in ib-b: held nowhere, and a path source is checked, never fetched",
		"mistral in ib-a: a local copy on n1 (its own disk or its fetch cache); a job placed there starts at once, on another node of ib-a it would fetch it first.",
		"mistral in ib-b: held nowhere yet: a job placed in ib-b would first fetch 134 MB from the origin. n3 is fetching it now (40% at 2.0 MB/s)",
		"ib-b: n4 is stale (no report for over 6s)",
		"ib-b: n[5-6] have no weight directories configured",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sentences, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("sentence %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
}

func TestExplainModelNodes(t *testing.T) {
	st := &api.ModelNodes{Nodes: []api.NodePresence{
		{Node: "n1", State: api.NodeOK, Holds: api.HoldLocal, Path: "/c/0123456789abcdef-m.gguf"},
		{Node: "n2", State: api.NodeOK, Holds: api.HoldShared, Path: "/filer/m.gguf"},
		{Node: "n3", State: api.NodeOK, Holds: api.HoldNone, Fetch: &api.FetchStatus{Node: "n3", Percent: 5, Rate: 1e6}},
		{Node: "n4", State: api.NodeStale, Holds: api.HoldLocal, Age: 7},
		{Node: "n5", State: api.NodeOK, Holds: api.HoldNone, CacheFree: 5e9, CacheTotal: 1e10},
		{Node: "n6", State: api.NodeOK, Holds: api.HoldLocal, Path: "/models/m.gguf"},
	}}
	got := strings.Join(ExplainModelNodes(st), "\n")
	for _, w := range []string{
		"n1: holds a copy in its fetch cache",
		"n2: sees it on the shared filer at /filer/m.gguf.",
		"n3: does not hold it yet; n3 is fetching it now (5% at 1.0 MB/s)",
		"n4: stale, last heard 7s ago; what it said then (local) does not count.",
		"n5: does not hold it; its cache has 5.0 GB free",
		"n6: holds a copy on its own disk at /models/m.gguf.",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

func TestExplainPlacement(t *testing.T) {
	p := &api.Placement{Count: 1, Choice: []string{"n1"}, Nodes: []api.PlacementNode{
		{Node: "n1", Rank: 1, Tier: "holds-local", Reason: "holds a local copy."},
		{Node: "n4", Rank: 4, Tier: "stale", Reason: "no report for 7s"},
	}}
	p.Model.Name = "m"
	p.Count = 2
	p.Fabrics = []api.PlacementFabric{{Fabric: "ib-b", Reason: "too few"}, {Fabric: "ib-a", Enough: true, Reason: "2 nodes can serve m"}}
	got := strings.Join(ExplainPlacement(p), "\n")
	for _, w := range []string{"Fabric ib-a can take all 2 nodes: 2 nodes can serve m.", "n1 ranks first (holds-local): holds a local copy.", "n4 ranks last (stale): no report for 7s.", "a job wanting 2 nodes should use n1"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}
