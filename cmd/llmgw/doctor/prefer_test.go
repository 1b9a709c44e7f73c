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
