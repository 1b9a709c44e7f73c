package slurm

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func rec(fields ...string) string {
	return strings.Join(fields, "\x1f") + "\x1e\n"
}

func TestParsePendingPlans(t *testing.T) {
	out := rec("12", "1765113600", "n[1-2]", "2", "debug", "llmgw:model=m1", "(null)") +
		// Mid-cycle: backfill cleared the plan and has not set it again.
		rec("13", "N/A", "(null)", "1", "debug", "hello", "llmgw: model m2 (--llmgw-model) in debug: preferred llmgw.m2") +
		// A comment with a newline and separators of its own.
		rec("14", "0", "", "1", "debug", "a|b\nc llmgw:model=m3 llmgw:warm", "")
	got, err := ParsePendingPlans([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []PendingJob{
		{ID: "12", Start: time.Unix(1765113600, 0), Nodes: []string{"n1", "n2"}, NumNodes: 2, Partition: "debug", Model: "m1"},
		{ID: "13", NumNodes: 1, Partition: "debug", Model: "m2"},
		{ID: "14", NumNodes: 1, Partition: "debug", Model: "m3", Warm: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParsePendingPlans = %+v\nwant %+v", got, want)
	}
	if jobs, err := ParsePendingPlans(nil); err != nil || len(jobs) != 0 {
		t.Errorf("ParsePendingPlans(empty) = %v, %v; want none", jobs, err)
	}
	if _, err := ParsePendingPlans([]byte("JOBID STARTTIME\n12 N/A\n")); err == nil {
		t.Error("ParsePendingPlans took output without the separators it asked for")
	}
	if _, err := ParsePendingPlans([]byte(rec("12; rm", "0", "", "1", "p", "", ""))); err == nil {
		t.Error("ParsePendingPlans took a job id that is not one")
	}
}

func TestModelOf(t *testing.T) {
	for _, c := range []struct {
		in    string
		admin string
		model string
		warm  bool
	}{
		{"", "", "", false},
		{"llmgw:model=qwen", "", "qwen", false},
		{"my run llmgw:model=qwen llmgw:composed", "", "qwen", false},
		{"xllmgw:model=qwen", "", "", false},
		{"llmgw:model=a,b", "", "a", false},
		{"llmgw:model=bad/name", "", "", false},
		{"llmgw:warm llmgw:model=m", "", "m", true},
		{"llmgw:warmer", "", "", false},
		{"", "site note; llmgw: model m4 (comment): no preference", "m4", false},
		{"", "llmgw: model m5: composed by llmgw sbatch", "m5", false},
		{"", "llmgw:warm", "", true},
		{"llmgw: model m6 (comment)", "", "", false}, // only job_submit writes the note, in the admin comment
		{"", "user text llmgw: model m6 (comment)", "", false},
	} {
		m, w := ModelOf(c.in, c.admin)
		if m != c.model || w != c.warm {
			t.Errorf("ModelOf(%q, %q) = %q, %v; want %q, %v", c.in, c.admin, m, w, c.model, c.warm)
		}
	}
}

func TestBackfillInterval(t *testing.T) {
	for _, c := range []struct {
		conf Config
		want time.Duration
		ok   bool
	}{
		{Config{}, 30 * time.Second, true},
		{Config{"schedulertype": "sched/backfill", "schedulerparameters": "batch_sched_delay=0,bf_interval=5,bf_continue"}, 5 * time.Second, true},
		{Config{"schedulertype": "sched/backfill", "schedulerparameters": "bf_interval=x"}, 30 * time.Second, true},
		{Config{"schedulertype": "sched/builtin", "schedulerparameters": "bf_interval=5"}, 0, false},
	} {
		got, ok := BackfillInterval(c.conf)
		if got != c.want || ok != c.ok {
			t.Errorf("BackfillInterval(%v) = %v, %v; want %v, %v", c.conf, got, ok, c.want, c.ok)
		}
	}
}
