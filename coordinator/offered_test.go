package coordinator

import (
	"fmt"
	"math/rand/v2"
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

// BenchmarkFeaturePlan is the reconciler's plan for 1,000 nodes in 8
// fabrics (a config record each) holding random mixes of 0-6 of 50
// models, from a fresh cluster: the models withheld (issue 26: 46 with
// feature_sets_max), the AvailableFeatures writes (one per record, whole),
// the presence calls, and the distinct sets, each of which split a record
// when presence was AvailableFeatures. scripts/bench/scale.sh prints it.
func BenchmarkFeaturePlan(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 17))
	nodes := make([]slurm.Node, 1000)
	desired := map[string][]string{}
	models := make([]string, 50)
	for m := range models {
		models[m] = fmt.Sprintf("m%02d", m)
	}
	for i := range nodes {
		fabric := fmt.Sprintf("ib-%d", i%8)
		nodes[i] = slurm.Node{Name: fmt.Sprintf("gpu%04d", i), Available: []string{fabric}, Active: []string{fabric}}
		for range rng.IntN(7) {
			desired[nodes[i].Name] = append(desired[nodes[i].Name], placement.FeaturePrefix+models[rng.IntN(len(models))])
		}
	}
	var plan slurm.FeaturePlan
	var withheld []string
	for b.Loop() {
		var offered []string
		offered, withheld = offeredFeatures(models, nodes, desired)
		plan = slurm.PlanFeatures(nodes, placement.FeaturePrefix, withhold(desired, withheld), offered)
	}
	sets := map[string]bool{}
	for _, n := range nodes {
		fs := slices.Clone(desired[n.Name])
		slices.Sort(fs)
		sets[n.Available[0]+" "+strings.Join(slices.Compact(fs), ",")] = true
	}
	b.ReportMetric(float64(len(withheld)), "withheld-models")
	b.ReportMetric(float64(len(plan.Records)), "record-writes")
	b.ReportMetric(float64(len(plan.Presence)), "presence-calls")
	b.ReportMetric(float64(len(sets)), "distinct-sets")
}
