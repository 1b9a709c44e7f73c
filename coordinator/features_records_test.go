package coordinator

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// TestWriteFeatureCommands writes, for scripts/bench/features.sh --records,
// the scontrol commands that give the dev cluster's 1,000 extra nodes
// (x0001..x1000, one slurm.conf line, no features) random mixes of 0-6 of
// 50 models, two ways: one file per way in $LLMGW_FEATURE_SETS_DIR, one
// command a line, for scontrol's interactive mode:
//   - llmgw: the reconciler's plan (the record offers every model a node of
//     it holds, written whole; presence as ActiveFeatures);
//   - per-set: each node's set as AvailableFeatures and ActiveFeatures, one
//     command per distinct set, as llmgw wrote presence before issue 26.
//
// The script applies each to a real slurmctld and counts its node config
// records. Without the variable there is nothing to write.
func TestWriteFeatureCommands(t *testing.T) {
	dir := os.Getenv("LLMGW_FEATURE_SETS_DIR")
	if dir == "" {
		t.Skip("LLMGW_FEATURE_SETS_DIR is not set: scripts/bench/features.sh --records sets it")
	}
	rng := rand.New(rand.NewPCG(1, 17))
	var models []string
	for m := range 50 {
		models = append(models, fmt.Sprintf("m%02d", m))
	}
	nodes := make([]slurm.Node, 1000)
	desired := map[string][]string{}
	for i := range nodes {
		nodes[i] = slurm.Node{Name: fmt.Sprintf("x%04d", i+1)}
		for range rng.IntN(7) {
			desired[nodes[i].Name] = append(desired[nodes[i].Name], placement.FeaturePrefix+models[rng.IntN(len(models))])
		}
	}
	var llmgw strings.Builder
	for _, u := range slurm.PlanFeatures(nodes, placement.FeaturePrefix, desired, nil).Updates() {
		llmgw.WriteString(strings.Join(u.Args(), " ") + "\n")
	}
	bySet := map[string][]string{}
	var order []string
	for _, n := range nodes {
		fs := slices.Clone(desired[n.Name])
		slices.Sort(fs)
		key := strings.Join(slices.Compact(fs), ",")
		if bySet[key] == nil {
			order = append(order, key)
		}
		bySet[key] = append(bySet[key], n.Name)
	}
	var perSet strings.Builder
	for _, key := range order {
		u := slurm.FeatureUpdate{Nodes: bySet[key], Record: true, Available: strings.Split(key, ","), Active: strings.Split(key, ",")}
		if key == "" {
			u.Available, u.Active = nil, nil
		}
		perSet.WriteString(strings.Join(u.Args(), " ") + "\n")
	}
	for name, body := range map[string]string{"llmgw": llmgw.String(), "per-set": perSet.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
