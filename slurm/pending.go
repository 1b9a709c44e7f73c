package slurm

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Backfill's plan for pending jobs (docs/slurm/behaviour.md §12). Only
// sched/backfill sets a pending job's SchedNodes and expected StartTime
// (backfill.c, _attempt_backfill after _add_reservation); every cycle first
// clears both for every pending job (_clear_job_estimates) and plans again,
// yielding its locks every bf_yield_interval, so a reader may catch a job
// with no plan mid-cycle. A plan is a forecast, not a promise: the main
// scheduler may start the job sooner, elsewhere.
//
// PendingPlans reads every pending job's plan in one squeue call, the one
// call per backfill interval a site can afford (root is not rate limited by
// slurmctld, so llmgw limits itself).

// A PendingJob is one pending job as backfill last planned it.
type PendingJob struct {
	ID string
	// Start is the expected start backfill computed; zero when none.
	Start time.Time
	// Nodes are the nodes backfill plans it on (SchedNodes, expanded); nil
	// when it has no plan (none yet, or read mid-cycle: "(null)").
	Nodes []string
	// NumNodes is the node count the job asks for (its minimum).
	NumNodes int
	// Partition is the partition (or comma-separated partitions) it waits in.
	Partition string
	// Model is the llmgw model the job names, "" when none (ModelOf).
	Model string
	// Warm says the job asked to wait for its weights (ModelOf).
	Warm bool
}

// pendingFormat is squeue's -O list for PendingPlans. A field with width 0
// is printed whole (squeue's _print_str), and each ends in a unit
// separator, the last in a record separator: a comment may hold '|',
// spaces or even a newline, none of which can split a record here.
// SchedNodes and StartTime exist from 22.05 to 26.05 under these names;
// admin_comment is where llmgw's job_submit module notes the model of a
// job that named it with --llmgw-model (the option itself, in the job's
// spank environment, reaches no client).
const pendingFormat = "JobID:0\x1f,StartTime:0\x1f,SchedNodes:0\x1f,NumNodes:0\x1f,Partition:0\x1f,Comment:0\x1f,admin_comment:0\x1e"

// PendingPlans reads every pending job with its backfill plan, in one call
// to slurmctld. StartTime is asked for in Unix seconds (SLURM_TIME_FORMAT),
// so neither the locale nor the coordinator's time zone can change its
// meaning.
func (r *Runner) PendingPlans(ctx context.Context) ([]PendingJob, error) {
	rr := *r
	rr.Env = append(append([]string(nil), r.Env...), "SLURM_TIME_FORMAT=%s")
	out, err := rr.Run(ctx, "squeue", "-h", "-t", "PD", "-O", pendingFormat)
	if err != nil {
		return nil, err
	}
	return ParsePendingPlans(out)
}

// ParsePendingPlans parses PendingPlans' squeue output. It does no I/O. A
// record that does not have the fields asked for is an error (a squeue that
// does not know a field name says so and exits non-zero; one that printed
// something else is not a squeue this parser knows); a job whose SchedNodes
// cannot be expanded keeps no plan.
func ParsePendingPlans(out []byte) ([]PendingJob, error) {
	var jobs []PendingJob
	for _, rec := range bytes.Split(out, []byte{0x1e}) {
		rec = bytes.TrimLeft(rec, "\r\n")
		if len(bytes.TrimSpace(rec)) == 0 {
			continue
		}
		f := strings.Split(string(rec), "\x1f")
		// Seven fields, each ended by 0x1f except the last (ended by the
		// record separator, which Split removed): six separators. A
		// comment holding 0x1f itself makes more; the extra ones belong to
		// the two comments at the end, where only the model tag is looked
		// for.
		if len(f) < 7 {
			return nil, fmt.Errorf("squeue: a pending job's record has %d fields, want 7: %.120q", len(f), rec)
		}
		j := PendingJob{ID: strings.TrimSpace(f[0]), Partition: strings.TrimSpace(f[4])}
		if !validJobID(j.ID) {
			return nil, fmt.Errorf("squeue: %.40q is not a job id", j.ID)
		}
		j.Start = parseSlurmTime(strings.TrimSpace(f[1]))
		if n := strings.TrimSpace(f[2]); n != "" && n != "(null)" && n != "N/A" {
			if nodes, err := Expand(n); err == nil {
				j.Nodes = nodes
			}
		}
		j.NumNodes, _ = strconv.Atoi(strings.TrimSpace(f[3]))
		j.Model, j.Warm = ModelOf(strings.Join(f[5:len(f)-1], "\x1f"), f[len(f)-1])
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// parseSlurmTime reads a time squeue printed with SLURM_TIME_FORMAT=%s, or,
// failing that, in its standard form in local time; zero for "N/A",
// "Unknown" and anything else.
func parseSlurmTime(s string) time.Time {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
		return time.Unix(n, 0)
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local); err == nil {
		return t
	}
	return time.Time{}
}

func validJobID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// WarmTag in a job's comment asks llmgw to hold the job's start until its
// nodes hold the model (or a bound passes): a job of a site without the
// SPANK plugin's --llmgw-warm asks this way.
const WarmTag = "llmgw:warm"

// The model of a pending job is read from its comment (CommentTag) or from
// the note llmgw's job_submit module begins in AdminComment ("llmgw: model
// M (--llmgw-model) ..."), which names the model of a job that gave it with
// the SPANK option: no client sees the job's spank environment.

var (
	commentTagRe = regexp.MustCompile(`(?:^|[\s;,])llmgw:model=([A-Za-z0-9._-]{1,64})(?:$|[\s;,])`)
	adminNoteRe  = regexp.MustCompile(`(?:^|; )llmgw: model ([A-Za-z0-9._-]{1,64})[ :]`)
	warmTagRe    = regexp.MustCompile(`(?:^|[\s;,])llmgw:warm(?:$|[\s;,])`)
)

// ModelOf finds the llmgw model a pending job names in its comment and
// admin comment: the comment tag in either, else job_submit's note in the
// admin comment (which users cannot write); and whether it asks to wait for
// the weights (the warm tag, which job_submit also writes for
// --llmgw-warm).
func ModelOf(comment, admin string) (model string, warm bool) {
	warm = warmTagRe.MatchString(comment) || warmTagRe.MatchString(admin)
	for _, s := range []string{comment, admin} {
		if m := commentTagRe.FindStringSubmatch(s); m != nil {
			return m[1], warm
		}
	}
	if m := adminNoteRe.FindStringSubmatch(admin); m != nil {
		return m[1], warm
	}
	return "", warm
}

// BackfillInterval is how often backfill plans, from SchedulerParameters'
// bf_interval (default 30 s, slurm.conf(5)); ok is false when the
// controller does not run sched/backfill, which plans nothing.
func BackfillInterval(c Config) (every time.Duration, ok bool) {
	sched, _ := c.Get("SchedulerType")
	sched = strings.ToLower(strings.TrimSpace(sched))
	if sched != "" && sched != "sched/backfill" {
		return 0, false
	}
	every = 30 * time.Second
	params, _ := c.Get("SchedulerParameters")
	for _, p := range strings.Split(params, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		if !found || !strings.EqualFold(k, "bf_interval") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			every = time.Duration(n) * time.Second
		}
	}
	return every, true
}
