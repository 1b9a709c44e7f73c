//go:build integration

package slurm

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/slurmtest"
	"github.com/llmgw/llmgw/placement"
)

// restoreFeatures puts every node's features back as they were when the
// test began, with scontrol update, when the test ends. Not with scontrol
// reconfigure, though it too drops what scontrol set (docs/slurm/behaviour.md §2): it makes
// every slurmd register again a moment later, and with ReturnToService=2 a
// node a later test sets DOWN in that moment comes straight back (seen:
// TestNodesJSONAgreesWithText found n4 idle after State=DOWN).
func restoreFeatures(t *testing.T, r *Runner) {
	nodes, err := r.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if _, err := r.Run(context.Background(), "scontrol", "update", "NodeName="+n.Name,
				"AvailableFeatures="+strings.Join(n.Available, ","), "ActiveFeatures="+strings.Join(n.Active, ",")); err != nil {
				t.Errorf("put %s's features back: %v", n.Name, err)
			}
		}
	})
}

func nodeMap(t *testing.T, r *Runner) map[string]Node {
	t.Helper()
	nodes, err := r.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Node{}
	for _, n := range nodes {
		m[n.Name] = n
	}
	return m
}

// TestFeaturesOnCluster plans and applies features on the real cluster: the
// fabrics survive, one call per resulting set, nodes already right get
// none, and a bad name in a list fails the call while the rest is applied
// and the read-back says which node is wrong.
func TestFeaturesOnCluster(t *testing.T) {
	r := clusterRunner(t)
	ctx := context.Background()
	restoreFeatures(t, r)
	const p = "llmgw."
	desired := map[string][]string{"n1": {"llmgw.llama"}, "n2": {"llmgw.llama"}, "n3": {"llmgw.llama", "llmgw.qwen"}}
	nodes, err := r.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each record offers what its nodes hold: n[1-2] llama, n[3-4] both.
	offered := map[string][]string{"ib-a": {"llmgw.llama"}, "ib-b": {"llmgw.llama", "llmgw.qwen"}}
	records := slurmtest.ConfigRecords(t, r, "debug")
	plan := PlanFeatures(nodes, p, desired, nil)
	want := []string{
		"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.llama ActiveFeatures=ib-a,llmgw.llama",
		"scontrol update NodeName='n[3-4]' AvailableFeatures=ib-b,llmgw.llama,llmgw.qwen ActiveFeatures=ib-b",
		"scontrol update NodeName=n3 ActiveFeatures=ib-b,llmgw.llama,llmgw.qwen",
	}
	if got := plan.Commands(); !slices.Equal(got, want) || plan.Unchanged != 0 {
		t.Fatalf("plan: %q (unchanged %d), want %q", got, plan.Unchanged, want)
	}
	res := r.ApplyFeatures(ctx, plan, nil)
	if err := res.Err(); err != nil || res.Calls != 3 {
		t.Fatalf("apply: %d calls, %v", res.Calls, err)
	}
	m := nodeMap(t, r)
	for name, fabric := range devFabrics {
		n := m[name]
		wantActive := append([]string{fabric}, desired[name]...)
		if !sameSet(n.Available, append([]string{fabric}, offered[fabric]...)) || !sameSet(n.Active, wantActive) {
			t.Errorf("%s: available %q active %q, want %q active of %q", name, n.Available, n.Active, wantActive, offered[fabric])
		}
	}
	if again := PlanFeatures(res.Nodes, p, desired, nil); len(again.Updates()) != 0 {
		t.Errorf("after applying, the plan is still %q", again.Commands())
	}
	if after := slurmtest.ConfigRecords(t, r, "debug"); after != records {
		t.Errorf("slurmctld has %d node config records after llmgw wrote its features, %d before", after, records)
	}

	// A bad name in the list: the call fails, the valid nodes change.
	bad := FeaturePlan{Presence: []FeatureUpdate{{Nodes: []string{"n4", "nosuch9"}, Active: []string{"ib-b", "llmgw.qwen"}}}}
	res = r.ApplyFeatures(ctx, bad, nil)
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "Invalid node name") {
		t.Errorf("errors = %v, want scontrol's invalid node name", res.Errors)
	}
	if !slices.Equal(res.Wrong, []string{"nosuch9"}) {
		t.Errorf("wrong after read-back = %q, want only nosuch9", res.Wrong)
	}
	if n := nodeMap(t, r)["n4"]; !sameSet(n.Active, []string{"ib-b", "llmgw.qwen"}) {
		t.Errorf("n4 active %q: the valid node of a failed call should be updated (docs/slurm/behaviour.md §2)", n.Active)
	}
}

// TestNodesJSONAgreesWithText checks that the state Nodes derives from
// sinfo -N --json is the one sinfo's %T prints, on idle, drained and down
// nodes of the live cluster.
func TestNodesJSONAgreesWithText(t *testing.T) {
	r := clusterRunner(t)
	ctx := context.Background()
	set := func(node, state string) {
		t.Helper()
		args := []string{"update", "NodeName=" + node, "State=" + state}
		if state != "RESUME" {
			args = append(args, "Reason=llmgw-test")
		}
		if _, err := r.Run(ctx, "scontrol", args...); err != nil {
			t.Fatal(err)
		}
	}
	set("n3", "DRAIN")
	set("n4", "DOWN")
	t.Cleanup(func() {
		set("n3", "RESUME")
		set("n4", "RESUME")
		// ReturnToService and the node's next ping bring n4 back; wait, so
		// later tests find four idle nodes.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if m := nodeMap(t, r); m["n3"].State == "idle" && m["n4"].State == "idle" {
				return
			}
		}
		t.Errorf("n3/n4 not idle 30 s after RESUME")
	})
	out, err := r.Run(ctx, "sinfo", "-N", "-h", "-o", "%N|%f|%b|%T")
	if err != nil {
		t.Fatal(err)
	}
	text, err := ParseNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	js := nodeMap(t, r)
	seen := map[string]bool{}
	for _, tn := range text {
		jn := js[tn.Name]
		if jn.State != tn.State || !slices.Equal(jn.Available, tn.Available) || !slices.Equal(jn.Active, tn.Active) {
			t.Errorf("%s: json %+v, text %+v", tn.Name, jn, tn)
		}
		seen[tn.State] = true
	}
	if !seen["drained"] || !seen["down"] {
		t.Errorf("states seen %v; the test meant to see drained and down", seen)
	}
	if !placement.Schedulable(js["n1"].State) || placement.Schedulable(js["n3"].State) || placement.Schedulable(js["n4"].State) {
		t.Errorf("schedulable: n1 %q, n3 %q, n4 %q", js["n1"].State, js["n3"].State, js["n4"].State)
	}
}

// extraNodes returns the never-registered nodes scripts/dev-cluster adds
// with LLMGW_DEV_EXTRA_NODES, or skips.
func extraNodes(b *testing.B, r *Runner, want int) []Node {
	nodes, err := r.Nodes(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var xs []Node
	for _, n := range nodes {
		if strings.HasPrefix(n.Name, "x") {
			xs = append(xs, n)
		}
	}
	if len(xs) < want {
		b.Skipf("the cluster has %d extra nodes, the benchmark needs %d: start it with LLMGW_DEV_EXTRA_NODES=%d scripts/dev-cluster up", len(xs), want, want)
	}
	return xs[:want]
}

// BenchmarkFeatureSync is a full resync of 1000 nodes whose llmgw features
// were wiped (as after scontrol reconfigure): read every node, plan, one
// scontrol call per distinct feature set (10, interleaved, so each hostlist
// is a long comma list), read back. scripts/bench/features.sh prints it
// beside one scontrol call per node.
func BenchmarkFeatureSync(b *testing.B) {
	if os.Getenv("SLURM_CONF") == "" {
		b.Skip("SLURM_CONF is not set")
	}
	r := &Runner{}
	ctx := context.Background()
	xs := extraNodes(b, r, 1000)
	var names []string
	desired := map[string][]string{}
	for i, n := range xs {
		names = append(names, n.Name)
		// 10 distinct sets: models 0..i%10.
		var fs []string
		for k := range i%10 + 1 {
			fs = append(fs, fmt.Sprintf("llmgw.model%d", k))
		}
		desired[n.Name] = fs
	}
	wipe := []string{"update", "NodeName=" + Compress(names), "AvailableFeatures=", "ActiveFeatures="}
	b.Cleanup(func() { r.Run(ctx, "scontrol", wipe...) })
	var calls, drifted int
	var read, apply time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := r.Run(ctx, "scontrol", wipe...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		nodes, err := r.Nodes(ctx)
		if err != nil {
			b.Fatal(err)
		}
		plan := PlanFeatures(nodes, "llmgw.", desired, nil)
		t1 := time.Now()
		res := r.ApplyFeatures(ctx, plan, nil)
		if err := res.Err(); err != nil {
			b.Fatal(err)
		}
		read += t1.Sub(t0)
		apply += time.Since(t1)
		calls, drifted = res.Calls, plan.Drifted()
	}
	b.ReportMetric(float64(calls), "calls/op")
	b.ReportMetric(float64(drifted), "nodes/op")
	b.ReportMetric(float64(read.Milliseconds())/float64(b.N), "read+plan-ms/op")
	b.ReportMetric(float64(apply.Milliseconds())/float64(b.N), "apply+readback-ms/op")
}
