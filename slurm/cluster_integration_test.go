//go:build integration

package slurm

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The dev cluster these tests expect (scripts/dev-cluster): four nodes in
// two fabrics.
var (
	devNodes   = []string{"n1", "n2", "n3", "n4"}
	devFabrics = map[string]string{"n1": "ib-a", "n2": "ib-a", "n3": "ib-b", "n4": "ib-b"}
)

// clusterRunner returns a Runner for the cluster SLURM_CONF names, or skips
// the test when there is none.
func clusterRunner(t *testing.T) *Runner {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		t.Skip("SLURM_CONF is not set: these tests need a running Slurm cluster; run them with `sudo make integration`, " +
			"or start one with `sudo scripts/dev-cluster up` and export the SLURM_CONF it prints")
	}
	if _, err := os.Stat(conf); err != nil {
		t.Fatalf("SLURM_CONF=%s: %v; start the cluster with `sudo scripts/dev-cluster up`", conf, err)
	}
	return &Runner{}
}

// TestClusterJobRunsOnAllNodes submits a real batch job over all four nodes
// and checks that its srun step ran a task on each: the proof that
// slurmctld, four slurmd, munge and the hooks all work together.
func TestClusterJobRunsOnAllNodes(t *testing.T) {
	r := clusterRunner(t)
	r.Timeout = 2 * time.Minute // sbatch --wait polls: ~10 s for a 1 s job
	// The job runs as root, like the test, so t.TempDir (0700) is readable
	// to it; slurmstepd writes the output file on each node's behalf.
	out := filepath.Join(t.TempDir(), "job.out")
	start := time.Now()
	stdout, err := r.Run(context.Background(), "sbatch",
		"-N4", "--wait", "--job-name=llmgw-integration", "--output="+out,
		"--wrap", `srun -N4 -l bash -c 'echo "$SLURMD_NODENAME"'`)
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	jobID := strings.TrimPrefix(strings.TrimSpace(string(stdout)), "Submitted batch job ")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("job %s output: %v", jobID, err)
	}

	// srun -l prefixes each line with its task number: "2: n3". The tasks
	// finish in any order; sorted, the log reads 0..3.
	line := regexp.MustCompile(`^(\d+): (\S+)$`)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	slices.Sort(lines)
	var ran []string
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("job %s output line %q is not \"TASK: NODE\"", jobID, l)
			continue
		}
		ran = append(ran, m[2])
	}
	slices.Sort(ran)
	if !slices.Equal(ran, devNodes) {
		t.Fatalf("job %s ran tasks on %q, want one on each of %q; output:\n%s", jobID, ran, devNodes, data)
	}
	t.Logf("job %s ran on %s (%s) in %.1fs; its output:\n%s", jobID, Compress(ran), strings.Join(ran, " "),
		time.Since(start).Seconds(), strings.Join(lines, "\n"))

	checkHooksRan(t, jobID)
}

// checkHooksRan checks, on the dev cluster, that the Prolog, TaskProlog and
// Epilog of scripts/slurm ran for the job on every node: they log a line
// each to log/hooks.log beside slurm.conf. Another cluster has no such log,
// and the check is skipped.
func checkHooksRan(t *testing.T, jobID string) {
	t.Helper()
	logFile := filepath.Join(filepath.Dir(os.Getenv("SLURM_CONF")), "log", "hooks.log")
	if _, err := os.Stat(logFile); err != nil {
		t.Logf("not checking the hooks: %v (not the dev cluster?)", err)
		return
	}
	var want []string
	for _, hook := range []string{"prolog", "task-prolog", "epilog"} {
		for _, n := range devNodes {
			want = append(want, hook+" job="+jobID+" node="+n+" ")
		}
	}
	// The Epilog runs after the job is complete, which is when sbatch
	// --wait returns, so its lines may still be on their way.
	var missing []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		data, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, w := range want {
			if !strings.Contains(string(data), w) {
				missing = append(missing, strings.TrimSpace(w))
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks %q: the hooks in scripts/slurm did not all run", logFile, missing)
		return
	}
	t.Logf("prolog, task-prolog and epilog ran for job %s on %s (%s)", jobID, Compress(devNodes), logFile)
}

// TestClusterFabrics checks the two fabrics are where the dev cluster puts
// them, through Runner.Nodes on the live sinfo.
func TestClusterFabrics(t *testing.T) {
	r := clusterRunner(t)
	nodes, err := r.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		want, ok := devFabrics[n.Name]
		if !ok {
			t.Errorf("unexpected node %s (features %q)", n.Name, n.Available)
			continue
		}
		if !slices.Contains(n.Available, want) || !slices.Contains(n.Active, want) {
			t.Errorf("node %s: available %q, active %q; want %s in both", n.Name, n.Available, n.Active, want)
		}
		for fabric := range map[string]bool{"ib-a": true, "ib-b": true} {
			if fabric != want && slices.Contains(n.Available, fabric) {
				t.Errorf("node %s has %s as well as %s", n.Name, fabric, want)
			}
		}
	}
	if got := Compress(names); got != "n[1-4]" {
		t.Errorf("sinfo lists %s, want n[1-4]", got)
	}
	t.Logf("fabrics: ib-a on %s, ib-b on %s", Compress(withFeature(nodes, "ib-a")), Compress(withFeature(nodes, "ib-b")))
}

func withFeature(nodes []Node, feature string) []string {
	var names []string
	for _, n := range nodes {
		if slices.Contains(n.Active, feature) {
			names = append(names, n.Name)
		}
	}
	return names
}

// TestHostlistAgreesWithScontrol checks Expand against `scontrol show
// hostnames`, and that scontrol reads Compress's output back as the same
// names: Slurm, not our reading of its manual, is the reference.
func TestHostlistAgreesWithScontrol(t *testing.T) {
	r := clusterRunner(t)
	ctx := context.Background()
	for _, list := range []string{
		"n[1-3],login",
		"n[08-10]",
		"gpu[001-003,010],n7",
		"n[1,1]",
		"a[9-11],b",
	} {
		out, err := r.Run(ctx, "scontrol", "show", "hostnames", list)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Fields(string(out))
		got, err := Expand(list)
		if err != nil {
			t.Errorf("Expand(%q): %v", list, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("Expand(%q) = %q, scontrol show hostnames says %q", list, got, want)
		}
	}
	for _, names := range [][]string{
		{"n4", "n2", "n1", "n3", "n7"},
		{"gpu001", "gpu002", "gpu1", "gpu099", "gpu100", "login"},
		{"x9", "x10", "y"},
	} {
		list := Compress(names)
		out, err := r.Run(ctx, "scontrol", "show", "hostnames", list)
		if err != nil {
			t.Fatalf("scontrol does not accept Compress(%q) = %q: %v", names, list, err)
		}
		got := strings.Fields(string(out))
		want := slices.Clone(names)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("scontrol show hostnames %q = %q, want %q", list, got, want)
		}
	}
}
