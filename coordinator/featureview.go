package coordinator

import (
	"slices"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// keepView keeps the nodes a sync published as the view llmgw sbatch asks
// for instead of running sinfo as the submitting user: slurmctld's rate
// limit throttles a burst of submissions from one user, and the
// coordinator reads Slurm anyway, as SlurmUser, whom the limit exempts.
func (f *features) keepView(nodes []slurm.Node, synced time.Time, defaultPartition string) {
	v := &api.FeatureView{Synced: synced.UTC(), Default: defaultPartition, Nodes: make([]api.FeatureViewNode, len(nodes))}
	for i, n := range nodes {
		v.Nodes[i] = api.FeatureViewNode{Name: n.Name, Partitions: slices.Clone(n.Partitions), Features: slices.Clone(n.Active)}
	}
	f.mu.Lock()
	f.seen = v
	f.mu.Unlock()
}

// view is the last published view, or nil when the reconciler is off or has
// not read Slurm yet (llmgw sbatch then reads sinfo itself). The view is
// never changed after keepView, so it is shared, not copied.
func (f *features) view() *api.FeatureView {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}
