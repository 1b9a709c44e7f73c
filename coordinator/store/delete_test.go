package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

func TestDeleteNodesForgetsAndLetsThemBack(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	rep := func(node string, seq int64) *api.Report {
		return &api.Report{ID: node, Node: node, Fabric: "default", Seq: seq, Started: now, Time: now, Looked: true,
			Weights: []api.Weight{{Path: "/w/a.gguf", Size: 1, Complete: true}},
			Fetches: []api.Fetch{{Source: "hf:o/r/a.gguf", Done: 1, Total: 2, Started: now}},
			Cache:   api.Cache{Dir: "/c"},
		}
	}
	if _, err := db.Ingest(ctx, []*api.Report{rep("n1", 5), rep("n2", 5)}, now); err != nil {
		t.Fatal(err)
	}
	gone, err := db.DeleteNodes(ctx, []string{"n1", "nx"})
	if err != nil || len(gone) != 1 || gone[0] != "n1" {
		t.Fatalf("DeleteNodes(n1, nx) = %v, %v; want [n1]", gone, err)
	}
	nodes, err := db.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Name != "n2" {
		t.Fatalf("nodes after delete: %v, %v; want n2 alone", nodes, err)
	}
	var rows int
	if err := db.cr().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM presence WHERE node = 'n1') + (SELECT count(*) FROM fetches WHERE node = 'n1')`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("n1's presence and fetch rows after delete: %d, %v; want none", rows, err)
	}
	// A forgotten node's next report is taken even with a lower seq: the
	// store forgot its last one.
	out, err := db.Ingest(ctx, []*api.Report{rep("n1", 1)}, now)
	if err != nil || !out[0].Stored {
		t.Errorf("n1's report after delete: %+v, %v; want stored", out, err)
	}
}
