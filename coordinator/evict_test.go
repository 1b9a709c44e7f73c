package coordinator

import (
	"context"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestEvictGrants: the coordinator says how many other nodes of a fabric
// hold a model, grants an eviction only while another copy remains, and
// counts a granted copy as gone, so two nodes asking at once cannot both
// remove the fabric's last two copies. Another fabric's copies never
// count, and a filer the node sees does.
func TestEvictGrants(t *testing.T) {
	e := newEnv(t, Config{}, testTokens)
	ctx := context.Background()
	for _, m := range []api.Model{{Name: "a", Source: "https://origin.test/a.gguf"}, {Name: "b", Source: "/lustre/b"}} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	aw := api.Weight{Path: "/var/cache/llmgw/" + catalog.CacheName("https://origin.test/a.gguf"), Size: 10, Complete: true}
	bw := api.Weight{Path: "/lustre/b", Size: 10, Complete: true, Shared: true}
	for _, r := range []*api.Report{
		report("n1", "f1", 1, aw), report("n2", "f1", 1, aw), report("n3", "f1", 1, bw),
		report("x1", "f2", 1, aw), report("x2", "f2", 1, aw),
	} {
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ans, err := e.agent.Evict(ctx, api.EvictQuery{Node: "n1", Models: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Fabric != "f1" || ans.Others["a"] != 1 || ans.Others["b"] != 1 || len(ans.Granted) != 0 {
		t.Fatalf("n1 asked: %+v; want fabric f1, one other holder of a (n2) and of b (n3's filer), nothing granted", ans)
	}
	// n1 and n2 both mean to evict a: the first is granted, the second
	// then holds the fabric's last copy.
	if ans, err = e.agent.Evict(ctx, api.EvictQuery{Node: "n1", Evict: []string{"a"}}); err != nil || !slices.Equal(ans.Granted, []string{"a"}) {
		t.Fatalf("n1 evicting a: %+v, %v; want it granted", ans, err)
	}
	if ans, err = e.agent.Evict(ctx, api.EvictQuery{Node: "n2", Evict: []string{"a"}}); err != nil || len(ans.Granted) != 0 || ans.Others["a"] != 0 {
		t.Fatalf("n2 evicting a after n1's grant: %+v, %v; want it refused, 0 others", ans, err)
	}
	// A grant lapses after two report intervals: n1's copy counts again.
	e.clock.set(e.clock.now().Add(2*e.srv.cfg.ReportInterval + 1))
	for _, r := range []*api.Report{report("n1", "f1", 2, aw), report("n2", "f1", 2, aw), report("n3", "f1", 2, bw)} {
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if ans, err = e.agent.Evict(ctx, api.EvictQuery{Node: "n2", Models: []string{"a"}}); err != nil || ans.Others["a"] != 1 {
		t.Fatalf("n2 asking after the grant lapsed: %+v, %v; want n1 counted again", ans, err)
	}
	// A node speaks for itself only.
	if _, err := e.client(testTokens.Admin).Evict(ctx, api.EvictQuery{Node: "nobody"}); err == nil {
		t.Error("an evict query for a node that never reported was answered")
	}
}
