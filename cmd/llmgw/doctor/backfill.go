package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/slurm"
)

// checkBackfill warns when slurmctld runs the backfill scheduler without
// SchedulerParameters=bf_continue. Every feature write of llmgw's
// coordinator (scontrol update NodeName=... Features=) changes slurmctld's
// node state, and backfill, which releases its locks now and then during
// a cycle, abandons the rest of the cycle when node state changed meanwhile
// unless bf_continue is set (slurm.conf(5), bf_continue). With features
// written every sync, jobs deep in a long queue could then never be
// backfilled. A warning, not an error: jobs still run, on the main
// scheduler's passes.
func checkBackfill(v slurmView) []Finding {
	const check = "backfill"
	verdict := func(c slurm.Config) string {
		sched, _ := c.Get("SchedulerType")
		sched = strings.ToLower(strings.TrimSpace(sched))
		if sched == "" {
			sched = "sched/backfill" // slurm.conf(5)'s default
		}
		if sched != "sched/backfill" {
			return sched
		}
		params, _ := c.Get("SchedulerParameters")
		if slices.Contains(strings.Split(lowerList(params), ","), "bf_continue") {
			return "continue"
		}
		return "abandon"
	}
	var fs []Finding
	for _, s := range v.valuesBy(verdict, same) {
		switch s.val {
		case "abandon":
			fs = append(fs, Finding{Check: check, Severity: Warn,
				Message: fmt.Sprintf("SchedulerType=sched/backfill without bf_continue in SchedulerParameters (%s): every feature write of llmgw's coordinator changes slurmctld's node state, and a backfill cycle that sees such a change abandons the rest of its queue, so jobs deep in a long queue may seldom be backfilled", s.from),
				Fix:     "add bf_continue to SchedulerParameters in slurm.conf (SchedulerParameters=<the present ones>,bf_continue), then scontrol reconfigure"})
		case "continue":
			fs = append(fs, Finding{Check: check,
				Message: fmt.Sprintf("SchedulerParameters has bf_continue (%s): backfill goes on through llmgw's feature writes", s.from)})
		default:
			fs = append(fs, Finding{Check: check,
				Message: fmt.Sprintf("SchedulerType=%s (%s): no backfill cycle for llmgw's feature writes to cut short", s.val, s.from)})
		}
	}
	return fs
}
