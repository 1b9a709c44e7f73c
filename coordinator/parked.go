package coordinator

import (
	"context"
	"path/filepath"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// From Slurm 23.02 a pending job whose --prefer no node can meet any more is
// parked (BadConstraints, priority 0) for up to a minute after the feature
// is back, or for good (slurm/jobs.go; docs/slurm/RELEASES.md). llmgw's
// features vanish under pending jobs for reasons of llmgw's own: a
// reconfigure wipes them until the next sync, a holder goes stale, gc takes
// the last copy. So after every sync the reconciler frees the jobs its own
// preference parked: it releases those the nodes can serve again and
// drops llmgw's part of the preference of the others, so no job waits
// longer than it would have without llmgw.

// squeuePath is squeue beside the configured sinfo: Debian's and SchedMD's
// installs keep the clients in one directory.
func squeuePath(cfg Config) string {
	return filepath.Join(filepath.Dir(cfg.Sinfo), "squeue")
}

// unpark frees the jobs parked on llmgw's features; nodes are Slurm's nodes
// as the sync left them. A failure is logged and retried at the next sync:
// it never fails the sync, whose features are right either way.
func (f *features) unpark(ctx context.Context, nodes []slurm.Node) {
	jobs, err := f.run.ParkedJobs(ctx, placement.FeaturePrefix)
	if err != nil {
		f.s.log.WithError(err).Warn("could not look for jobs Slurm parked on llmgw's features (retried at the next sync)")
		return
	}
	for _, j := range jobs {
		did, err := f.run.Unpark(ctx, j, nodes)
		log := f.s.log.WithField("job", j.ID).WithField("prefer", j.Prefer)
		if err != nil {
			log.WithError(err).Warn("could not free a job Slurm parked on llmgw's features (retried at the next sync)")
			continue
		}
		log.WithField("action", did).Info("freed a job Slurm parked (BadConstraints) on llmgw's features")
	}
}
