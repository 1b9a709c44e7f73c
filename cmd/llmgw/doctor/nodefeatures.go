package doctor

import (
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/slurm"
)

// checkNodeFeatures says what llmgw does about slurmctld's NodeFeatures
// plugin. llmgw writes presence as ActiveFeatures beside one
// AvailableFeatures superset (every catalog model) on every node, which
// means what it says only without such a plugin: slurmctld hands every
// ActiveFeatures update to the plugin's node_xlate, and node_features/
// helpers keeps each active feature it does not manage (llmgw could add a
// model's feature, never take it off a node that lost the model), while
// knl_generic makes every available feature of a KNL node active
// (src/plugins/node_features/*, 22.05 to 26.05). So with a plugin the
// coordinator writes no node features and says so; jobs get no preference
// from llmgw, which costs a hint, never a job. A warning, since the site
// loses llmgw's placement hint.
func checkNodeFeatures(v slurmView) []Finding {
	const check = "node features plugin"
	get := func(c slurm.Config) string { return strings.Join(slurm.NodeFeaturesPlugins(c), ",") }
	var fs []Finding
	for _, s := range v.valuesBy(get, same) {
		if s.val == "" {
			fs = append(fs, Finding{Check: check,
				Message: fmt.Sprintf("no NodeFeaturesPlugins (%s): llmgw writes presence as ActiveFeatures, and every catalog model once as AvailableFeatures, which splits no node config record", s.from)})
			continue
		}
		fs = append(fs, Finding{Check: check, Severity: Warn,
			Message: fmt.Sprintf("NodeFeaturesPlugins=%s (%s): the plugin rewrites every ActiveFeatures update (node_features/helpers keeps each active feature it does not manage, so a model's feature could never leave a node that lost it; knl_generic makes every available feature of a KNL node active), so llmgw's coordinator writes no node features on this cluster and jobs get no preference from llmgw (docs/slurm/behaviour.md §11)", s.val, s.from),
			Fix:     "run the coordinator with features = false to say so, or remove NodeFeaturesPlugins if nothing needs it (its features need reboots; llmgw's do not)"})
	}
	return fs
}
