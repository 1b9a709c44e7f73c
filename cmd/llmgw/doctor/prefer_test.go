package doctor

import (
	"strings"
	"testing"
)

func TestPreferValidation(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct{ params, want string }{
		{"<unset>", "ignore_prefer_validation is not set"},
		{"batch_sched_delay=0", "ignore_prefer_validation is not set"},
		{"batch_sched_delay=0,ignore_prefer_validation", "falls back to the job's constraint, for every job"},
		{"Ignore_Prefer_Validation", "may be parked (BadConstraints)"},
	} {
		fs := CheckSettings(with(h.good(), "schedulerparameters", c.params), h.conf, nil, h.opts())
		if sev, msg := worst(fs, "prefer validation"); sev != OK || !strings.Contains(msg, c.want) {
			t.Errorf("SchedulerParameters=%s: %s %q; want OK saying %q", c.params, sev, msg, c.want)
		}
	}
}

// TestBackfillContinue: the backfill scheduler (slurm.conf's default)
// without bf_continue abandons its cycle at every feature write of llmgw's
// coordinator: a warning naming the fix; with it, or with another
// scheduler, nothing to fix. The file and the running slurmctld are judged
// each.
func TestBackfillContinue(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct {
		sched, params string
		sev           Severity
		want          string
	}{
		{"<unset>", "<unset>", Warn, "without bf_continue"},
		{"sched/backfill", "batch_sched_delay=0", Warn, "without bf_continue"},
		{"Sched/Backfill", "batch_sched_delay=0,BF_Continue", OK, "backfill goes on"},
		{"<unset>", "bf_continue,bf_interval=30", OK, "backfill goes on"},
		{"sched/builtin", "<unset>", OK, "no backfill cycle"},
	} {
		fs := CheckSettings(with(h.good(), "schedulertype", c.sched, "schedulerparameters", c.params), h.conf, nil, h.opts())
		sev, msg := worst(fs, "backfill")
		if sev != c.sev || !strings.Contains(msg, c.want) {
			t.Errorf("SchedulerType=%s SchedulerParameters=%s: %s %q; want %s saying %q", c.sched, c.params, sev, msg, c.sev, c.want)
		}
		for _, f := range fs {
			if f.Check == "backfill" && f.Severity == Warn && !strings.Contains(f.Fix, "bf_continue") {
				t.Errorf("the warning's fix %q does not name bf_continue", f.Fix)
			}
		}
	}
	// The running slurmctld without it, the file with it: a warning for the
	// running one.
	fs := CheckSettings(with(h.good(), "schedulerparameters", "bf_continue"), h.conf, with(h.good(), "schedulerparameters", "batch_sched_delay=0"), h.opts())
	if sev, msg := worst(fs, "backfill"); sev != Warn || !strings.Contains(msg, "the running slurmctld") {
		t.Errorf("file with bf_continue, running slurmctld without: %s %q; want a warning for the running slurmctld", sev, msg)
	}
}

// TestNodeFeaturesPlugin: with a NodeFeatures plugin llmgw writes no node
// features (the plugin rewrites ActiveFeatures updates): a warning that
// says so and names the plugin; without one, what llmgw writes.
func TestNodeFeaturesPlugin(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct {
		plugins string
		sev     Severity
		want    string
	}{
		{"<unset>", OK, "writes presence as ActiveFeatures"},
		{"(null)", OK, "writes presence as ActiveFeatures"},
		{"node_features/helpers", Warn, "NodeFeaturesPlugins=node_features/helpers"},
		{"node_features/knl_generic", Warn, "writes no node features on this cluster"},
	} {
		fs := CheckSettings(with(h.good(), "nodefeaturesplugins", c.plugins), h.conf, nil, h.opts())
		if sev, msg := worst(fs, "node features plugin"); sev != c.sev || !strings.Contains(msg, c.want) {
			t.Errorf("NodeFeaturesPlugins=%s: %s %q; want %s saying %q", c.plugins, sev, msg, c.sev, c.want)
		}
	}
}
