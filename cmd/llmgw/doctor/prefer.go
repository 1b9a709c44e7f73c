package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// checkPreferValidation reports SchedulerParameters=ignore_prefer_validation
// and what it changes for llmgw (docs/slurm/RELEASES.md, "ignore_prefer_validation"):
// with it Slurm accepts a --prefer no node can meet and runs the job on its
// constraint, so a single-node job is never rejected or parked by a stale
// llmgw feature; a multi-node job whose preference fewer nodes meet can
// still be parked on 24.11 and 26.05, and on 24.11 one went BadConstraints.
// Neither way is wrong for llmgw: this is a report, not a fix.
func checkPreferValidation(v slurmView) []Finding {
	vs := v.values("SchedulerParameters", lowerList)
	fs := differs("SchedulerParameters", vs)
	for _, s := range vs {
		params := strings.Split(s.val, ",")
		if !slices.Contains(params, "ignore_prefer_validation") {
			fs = append(fs, Finding{Check: "prefer validation",
				Message: fmt.Sprintf("ignore_prefer_validation is not set in %s: Slurm rejects a --prefer no node can meet, so job_submit.lua adds one only from a fresh feature file and llmgw sbatch retries without it", s.from)})
			continue
		}
		fs = append(fs, Finding{Check: "prefer validation",
			Message: fmt.Sprintf("SchedulerParameters=ignore_prefer_validation in %s: Slurm accepts a --prefer no node can meet and falls back to the job's constraint, for every job, not only llmgw's; "+
				"a single-node job is never rejected or parked by a vanished llmgw feature (job_submit.lua then adds its preference even from a feature file the coordinator has not refreshed for a while), but from 24.11 a multi-node job whose preference fewer nodes meet may be parked (BadConstraints) and is scheduled only at a later pass; llmgw's coordinator frees what its features park", s.from)})
	}
	return fs
}
