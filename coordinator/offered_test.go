package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// TestOfferedFeatures: every catalog model is offered, whatever the
// presence, as long as the superset on every node keeps slurmctld's node
// listing within its share of Slurm's message limit; past it the
// least-held models are withheld, the same ones every run.
func TestOfferedFeatures(t *testing.T) {
	models := make([]string, 200)
	for i := range models {
		// 64 characters, the longest name the catalog takes.
		models[i] = fmt.Sprintf("m%03d-%s", i, strings.Repeat("x", 59))
	}
	cluster := func(n int) []slurm.Node {
		nodes := make([]slurm.Node, n)
		for i := range nodes {
			nodes[i] = slurm.Node{Name: fmt.Sprintf("g%06d", i), Available: []string{"ib-a", "nvme"}}
		}
		return nodes
	}
	// m000 is held by the most nodes, m199 by none.
	desired := map[string][]string{}
	for i := range 200 {
		for j := range 200 - i {
			node := fmt.Sprintf("g%06d", j)
			desired[node] = append(desired[node], placement.FeaturePrefix+models[i])
		}
	}
	offered, withheld := offeredFeatures(models, cluster(10000), desired)
	if len(offered) != 200 || len(withheld) != 0 {
		t.Fatalf("10,000 nodes, 200 models of 64 characters: %d offered, %d withheld; want all offered", len(offered), len(withheld))
	}
	if !slices.IsSorted(offered) || offered[0] != placement.FeaturePrefix+models[0] {
		t.Errorf("offered is not the sorted features: %q…", offered[:2])
	}
	offered, withheld = offeredFeatures(models, cluster(100000), desired)
	per := len(strings.Join(offered, ",")) + len("ib-a,nvme,")
	if len(withheld) == 0 || per*100000 > maxNodeListing {
		t.Fatalf("100,000 nodes: %d withheld, %d bytes a node; want some withheld and at most %d in all", len(withheld), per, maxNodeListing)
	}
	if withheld[len(withheld)-1] != models[199] || slices.Contains(withheld, models[0]) {
		t.Errorf("withheld %q…%q: want the least-held", withheld[0], withheld[len(withheld)-1])
	}
	again, _ := offeredFeatures(models, cluster(100000), desired)
	if !slices.Equal(again, offered) {
		t.Errorf("a second run offers other models")
	}
	kept := withhold(desired, withheld)
	for _, fs := range kept {
		for _, f := range fs {
			if !slices.Contains(offered, f) {
				t.Fatalf("withhold kept %s, which is not offered", f)
			}
		}
	}
}
