//go:build integration

package slurm

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The submission path of this package on the dev cluster
// (scripts/dev-cluster): Runner.Submit's refusal-and-retry against real
// Slurm, and the SPANK plugin's check of --llmgw-model. Where jobs land
// with llmgw's features in place is tested end to end, with a real
// coordinator, its feature reconciler and real agents, in
// cmd/llmgw/submit_integration_test.go: this package may not import the
// rest of llmgw, and a hand-written feature file or hand-set features here
// would test a stand-in, not the product.

// finishedJob is what `scontrol show job` says of a job that has ended.
type finishedJob struct {
	ID, State, NodeList, Features, Comment, AdminComment string
}

var (
	reJobState = regexp.MustCompile(`JobState=(\S+)`)
	reNodeList = regexp.MustCompile(`(?m)^\s+NodeList=(\S+)`)
	reFeatures = regexp.MustCompile(`(?m)^\s+Features=(\S*)`)
	reComment  = regexp.MustCompile(`(?m)^\s+Comment=(.*)$`)
	reAdmin    = regexp.MustCompile(`(?m)^\s+AdminComment=(.*)$`)
)

// waitJob waits for the job to end, so the next test finds the nodes idle
// (a preference is soft: a busy holder would send the job elsewhere).
func waitJob(t *testing.T, r *Runner, id string) finishedJob {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := r.Run(context.Background(), "scontrol", "show", "job", id)
		if err != nil {
			t.Fatal(err)
		}
		s := string(out)
		m := reJobState.FindStringSubmatch(s)
		if m != nil && (m[1] == "COMPLETED" || m[1] == "FAILED" || m[1] == "CANCELLED" || m[1] == "TIMEOUT" || m[1] == "NODE_FAIL") {
			j := finishedJob{ID: id, State: m[1]}
			for _, f := range []struct {
				re  *regexp.Regexp
				dst *string
			}{{reNodeList, &j.NodeList}, {reFeatures, &j.Features}, {reComment, &j.Comment}, {reAdmin, &j.AdminComment}} {
				if m := f.re.FindStringSubmatch(s); m != nil {
					*f.dst = strings.TrimSpace(m[1])
				}
			}
			t.Logf("job %s: %s on %s, Features=%s Comment=%q AdminComment=%q", id, j.State, j.NodeList, j.Features, j.Comment, j.AdminComment)
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s has not ended after 90 s:\n%s", id, s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// spankLoaded skips the test when the dev cluster runs without the plugin
// (bin/llmgw_spank.so not built: make spank needs libslurm-dev).
func spankLoaded(t *testing.T, r *Runner) {
	t.Helper()
	if !r.SpankOption(context.Background()) {
		const why = "sbatch does not know --llmgw-model: build the plugin (make spank) and restart the dev cluster"
		// Under CI a skip here would hide the plugin's tests on a release
		// without anyone noticing (it did, on a fresh machine's 22.05).
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// TestSubmitRefusesABadModelName: the SPANK plugin validates
// --llmgw-model in sbatch itself, before the job reaches slurmctld.
func TestSubmitRefusesABadModelName(t *testing.T) {
	r := clusterRunner(t)
	spankLoaded(t, r)
	_, err := r.Run(context.Background(), "sbatch", "--llmgw-model=a|b", "--wrap", "true")
	if err == nil || !strings.Contains(err.Error(), "--llmgw-model") {
		t.Errorf("sbatch --llmgw-model='a|b': %v; want a refusal naming the option", err)
	}
}

// TestSubmitFallsBackWhenSlurmRefuses gives real Slurm preferences it
// refuses, with both of its answers (docs/slurm/behaviour.md §1), as features changing between
// sinfo and sbatch would: the job must run anyway, without the preference.
// It needs no features set by hand: a feature no node has, and two fabrics
// no node has both of, provoke the two refusals on the dev cluster as it
// comes up. (The end-to-end test cannot provoke them: llmgw sbatch reads
// sinfo just before it submits, so its preference is satisfiable unless
// the features change in between.)
func TestSubmitFallsBackWhenSlurmRefuses(t *testing.T) {
	r := clusterRunner(t)
	for _, prefer := range []string{
		"llmgw.never-seen-anywhere", // Invalid preferred feature specification
		"ib-a&ib-b",                 // Requested node configuration is not available
	} {
		var stdout, stderr strings.Builder
		var refusal string
		s := Submission{
			Args:   []string{"--parsable", "--output=/dev/null", "--wrap", "true"},
			Script: -1,
			// No model tag: a job naming a model no node's catalog holds
			// would be failed by llmgw's TaskProlog, which is not what
			// this tests; the composed tag shows the rest of the
			// composition survives the resubmission.
			Added: Composition{Prefer: prefer, Comment: ComposedTag},
		}
		status, err := r.Submit(context.Background(), s, &stdout, &stderr, func(m string) { refusal = m })
		if err != nil || status != 0 {
			t.Fatalf("--prefer=%s: Submit = %d, %v; stderr %q", prefer, status, err, stderr.String())
		}
		if !PreferRejected(refusal) {
			t.Errorf("--prefer=%s: Slurm's refusal %q is not one PreferRejected knows", prefer, refusal)
		}
		j := waitJob(t, r, strings.TrimSpace(stdout.String()))
		if j.State != "COMPLETED" || j.Comment != ComposedTag {
			t.Errorf("--prefer=%s: job %s, Comment %q", prefer, j.State, j.Comment)
		}
	}
}

// TestSubmitLeavesNoDrainedNode runs last in this file (go test keeps source
// order): no test here may leave a node drained.
func TestSubmitLeavesNoDrainedNode(t *testing.T) {
	r := clusterRunner(t)
	out, err := r.Run(context.Background(), "sinfo", "-R", "-h")
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("sinfo -R: %s", s)
	}
}
