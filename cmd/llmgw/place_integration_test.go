//go:build integration

package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// TestPlacePartition runs `llmgw place --partition` against the dev cluster
// (scripts/dev-cluster: partition debug = n[1-4], ib-a on n[1-2], ib-b on
// n[3-4]): the partition's nodes come from the real sinfo, and a 2-node job
// for a model held on n3 goes to ib-b.
func TestPlacePartition(t *testing.T) {
	if os.Getenv("SLURM_CONF") == "" {
		t.Skip("SLURM_CONF is not set: this test needs the dev cluster (scripts/dev-cluster up)")
	}
	url, nodeTok, adminTok := testCoordinator(t)
	ctx := context.Background()
	admin := &api.Client{BaseURL: url, Token: strings.TrimSpace(readFile(t, adminTok))}
	if _, err := admin.PutModel(ctx, api.Model{Name: "llama", Source: "/srv/llama.gguf", Size: 1e9}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{"n1", "n2", "n3", "n4"} {
		r := &api.Report{ID: node, Seq: 1, Node: node, Fabric: map[bool]string{true: "ib-a", false: "ib-b"}[i < 2], Looked: true,
			Cache: api.Cache{Dir: "/var/cache/llmgw", FreeBytes: 1e12, TotalBytes: 2e12}}
		if node == "n3" {
			r.Weights = []api.Weight{{Path: "/srv/llama.gguf", Size: 1e9, Complete: true}}
		}
		agent := &api.Client{BaseURL: url, Token: strings.TrimSpace(readFile(t, nodeTok(node)))}
		if _, err := agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	environ := map[string]string{"LLMGW_COORDINATOR": url}

	code, out, errs := llmgwRun(t, environ, "place", "--model", "llama", "-N", "2", "--partition", "debug", "--json")
	var p api.Placement
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("place --partition debug: exit %d: %s\n%s", code, errs, out)
	}
	var nodes []string
	for _, n := range p.Nodes {
		nodes = append(nodes, n.Node)
	}
	if got := strings.Join(nodes, " "); got != "n3 n4 n1 n2" || strings.Join(p.Choice, ",") != "n3,n4" || p.Fabrics[0].Fabric != "ib-b" {
		t.Errorf("ranking %q, choice %v, fabrics %+v; want ib-b's n3,n4 first", got, p.Choice, p.Fabrics)
	}

	code, _, errs = llmgwRun(t, environ, "place", "--model", "llama", "--partition", "nosuch")
	if code != 1 || !strings.Contains(errs, `partition "nosuch"`) || !strings.Contains(errs, "sinfo -s") {
		t.Errorf("unknown partition: exit %d, %q", code, errs)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
