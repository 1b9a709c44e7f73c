package coordinator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/placement"
)

// TestWriteFeatureSets writes, for scripts/bench/features.sh --records, the
// features the reconciler's plan leaves on each of BenchmarkFeatureSets'
// 1,000 nodes, unbounded and bounded by the default feature_sets_max: one
// file per bound in $LLMGW_FEATURE_SETS_DIR, a line "NODE FEATURES" each,
// the nodes renamed x0001.. as the dev cluster's extra nodes are. The
// script applies them to a real slurmctld and counts its node config
// records. Without the variable there is nothing to write.
func TestWriteFeatureSets(t *testing.T) {
	dir := os.Getenv("LLMGW_FEATURE_SETS_DIR")
	if dir == "" {
		t.Skip("LLMGW_FEATURE_SETS_DIR is not set: scripts/bench/features.sh --records sets it")
	}
	nodes, desired := randomCluster(1000, 50, 1)
	for _, max := range []int{-1, DefaultFeatureSetsMax} {
		bounded, _ := boundFeatureSets(nodes, placement.FeaturePrefix, desired, max)
		var b strings.Builder
		for i, fs := range plannedFeatures(nodes, bounded) {
			fmt.Fprintf(&b, "x%04d %s\n", i+1, strings.Join(fs, ","))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("max=%d", max)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
