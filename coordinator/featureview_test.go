package coordinator

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// TestPlacementView: GET /v1/placement?view=1 carries the nodes the last
// sync published, with the default partition; without view=1, or with the
// reconciler off, it carries none, and llmgw sbatch reads sinfo itself.
func TestPlacementView(t *testing.T) {
	ctx := context.Background()
	cfg := Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute, Features: true,
		FeatureFile: filepath.Join(t.TempDir(), "features")}
	e := newEnv(t, cfg, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m1", Source: "/lustre/m1"}); err != nil {
		t.Fatal(err)
	}
	q := api.PlacementQuery{Model: "m1", View: true}
	if p, err := e.anon.Placement(ctx, q); err != nil || p.View != nil {
		t.Fatalf("before any sync: view %+v, %v; want none", p, err)
	}
	nodes := []slurm.Node{
		{Name: "n1", Active: []string{"ib-a"}, Partitions: []string{"debug"}},
		{Name: "n2", Active: []string{"ib-a", "llmgw.m1"}, Partitions: []string{"debug", "p2"}},
	}
	synced := time.Unix(1796288377, 0)
	if err := e.srv.features.publish(nodes, synced, "debug", false); err != nil {
		t.Fatal(err)
	}
	p, err := e.anon.Placement(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	want := api.FeatureView{Synced: synced.UTC(), Default: "debug", Nodes: []api.FeatureViewNode{
		{Name: "n1", Partitions: []string{"debug"}, Features: []string{"ib-a"}},
		{Name: "n2", Partitions: []string{"debug", "p2"}, Features: []string{"ib-a", "llmgw.m1"}},
	}}
	if p.View == nil || fmt.Sprint(*p.View) != fmt.Sprint(want) {
		t.Errorf("view %+v, want %+v", p.View, want)
	}
	if p, err := e.anon.Placement(ctx, api.PlacementQuery{Model: "m1"}); err != nil || p.View != nil {
		t.Errorf("without view=1: %+v, %v; want no view", p.View, err)
	}

	off := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute}, testTokens)
	if _, err := off.admin.PutModel(ctx, api.Model{Name: "m1", Source: "/lustre/m1"}); err != nil {
		t.Fatal(err)
	}
	if p, err := off.anon.Placement(ctx, q); err != nil || p.View != nil {
		t.Errorf("reconciler off: %+v, %v; want no view", p.View, err)
	}
}
