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

// randomCluster is n nodes in 8 fabrics (a site feature each), each holding
// a random mix of 0-6 of models: the mix that splits slurmctld's node
// records the most.
func randomCluster(n, models int, seed uint64) ([]slurm.Node, map[string][]string) {
	rng := rand.New(rand.NewPCG(seed, 17))
	nodes := make([]slurm.Node, n)
	desired := map[string][]string{}
	for i := range nodes {
		fabric := fmt.Sprintf("ib-%d", i%8)
		nodes[i] = slurm.Node{Name: fmt.Sprintf("gpu%04d", i), Available: []string{fabric}, Active: []string{fabric}, Partitions: []string{"gpu"}}
		for range rng.IntN(7) {
			desired[nodes[i].Name] = append(desired[nodes[i].Name], fmt.Sprintf("%sm%02d", placement.FeaturePrefix, rng.IntN(models)))
		}
	}
	return nodes, desired
}

// featureSets counts the distinct sets a plan leaves on the nodes: those it
// updates and those it leaves as they are.
func featureSets(nodes []slurm.Node, desired map[string][]string) int {
	seen := map[string]bool{}
	for _, fs := range plannedFeatures(nodes, desired) {
		seen[strings.Join(fs, ",")] = true
	}
	return len(seen)
}

// plannedFeatures is each node's features, sorted, once the plan for
// desired is applied: what it updates and what it leaves as it is.
func plannedFeatures(nodes []slurm.Node, desired map[string][]string) [][]string {
	plan := slurm.PlanFeatures(nodes, placement.FeaturePrefix, desired)
	after := map[string][]string{}
	for _, u := range plan.Updates {
		for _, n := range u.Nodes {
			after[n] = u.Active
		}
	}
	out := make([][]string, len(nodes))
	for i, n := range nodes {
		fs, ok := after[n.Name]
		if !ok {
			fs = n.Active
		}
		fs = slices.Clone(fs)
		slices.Sort(fs)
		out[i] = fs
	}
	return out
}

// TestBoundFeatureSets: 1,000 nodes holding random mixes of 50 models
// would leave hundreds of distinct feature sets; bounded, at most max, with
// the most-held models kept and every node's features a subset of what it
// holds.
func TestBoundFeatureSets(t *testing.T) {
	nodes, desired := randomCluster(1000, 50, 1)
	if n := featureSets(nodes, desired); n <= 64 {
		t.Fatalf("the unbounded plan has only %d sets; the test needs more than the bound to mean anything", n)
	}
	holders := map[string]int{}
	for _, fs := range desired {
		for _, f := range slices.Compact(slices.Sorted(slices.Values(fs))) {
			holders[f]++
		}
	}
	for _, max := range []int{16, 64, 200} {
		bounded, left := boundFeatureSets(nodes, placement.FeaturePrefix, desired, max)
		if n := featureSets(nodes, bounded); n > max {
			t.Errorf("max %d: %d distinct sets", max, n)
		}
		kept := map[string]bool{}
		for name, fs := range bounded {
			for _, f := range fs {
				if !slices.Contains(desired[name], f) {
					t.Errorf("max %d: %s got %s, which it does not hold", max, name, f)
				}
				kept[f] = true
			}
		}
		if len(kept) == 0 {
			t.Errorf("max %d: no model kept a feature", max)
		}
		for _, m := range left {
			if kept[placement.FeaturePrefix+m] {
				t.Errorf("max %d: %s is withheld but some node kept its feature", max, m)
			}
		}
		// The most-held model is always kept when it alone fits.
		most := ""
		for f, n := range holders {
			if most == "" || n > holders[most] || n == holders[most] && f < most {
				most = f
			}
		}
		if !kept[most] {
			t.Errorf("max %d: the most-held model %s lost its feature (withheld %v)", max, most, left)
		}
		again, left2 := boundFeatureSets(nodes, placement.FeaturePrefix, desired, max)
		if !slices.Equal(left, left2) || fmt.Sprint(again) != fmt.Sprint(bounded) {
			t.Errorf("max %d: two runs on the same input chose differently", max)
		}
		t.Logf("max %d: %d sets, %d of %d models withheld", max, featureSets(nodes, bounded), len(left), len(holders))
	}
	// No bound: the input as it is.
	if out, left := boundFeatureSets(nodes, placement.FeaturePrefix, desired, -1); len(left) != 0 || fmt.Sprint(out) != fmt.Sprint(desired) {
		t.Errorf("max -1 changed the plan: withheld %v", left)
	}
}

// TestBoundFeatureSetsKeepsSmallClusters: where the sets stay within the
// bound, nothing is withheld and the plan is the unbounded one.
func TestBoundFeatureSetsKeepsSmallClusters(t *testing.T) {
	nodes, desired := randomCluster(30, 4, 2)
	out, left := boundFeatureSets(nodes, placement.FeaturePrefix, desired, 64)
	if len(left) != 0 || fmt.Sprint(out) != fmt.Sprint(desired) {
		t.Errorf("a 30-node cluster with %d sets lost features: withheld %v", featureSets(nodes, desired), left)
	}
}

// BenchmarkFeatureSets reports the distinct feature sets the reconciler's
// plan leaves on 1,000 nodes holding random mixes of 50 models, unbounded
// and bounded by the default (scripts/bench/features.sh --plan), and what
// the bounding costs a sync.
func BenchmarkFeatureSets(b *testing.B) {
	nodes, desired := randomCluster(1000, 50, 1)
	for _, max := range []int{-1, DefaultFeatureSetsMax} {
		b.Run(fmt.Sprintf("max=%d", max), func(b *testing.B) {
			var bounded map[string][]string
			var left []string
			for b.Loop() {
				bounded, left = boundFeatureSets(nodes, placement.FeaturePrefix, desired, max)
			}
			b.ReportMetric(float64(featureSets(nodes, bounded)), "sets")
			b.ReportMetric(float64(len(left)), "withheld-models")
		})
	}
}
