package slurm

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func n(name string, avail, active []string) Node {
	return Node{Name: name, Available: avail, Active: active, State: "idle"}
}

func l(s ...string) []string { return s }

func TestPlanFeatures(t *testing.T) {
	const p = "llmgw."
	tests := []struct {
		name      string
		nodes     []Node
		desired   map[string][]string
		want      []string // the commands
		unchanged int
		unknown   []string
	}{
		{
			name:      "nothing desired, nothing owned: no call",
			nodes:     []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", nil, nil)},
			unchanged: 2,
		},
		{
			name:  "add to the admin's features, grouped by resulting set",
			nodes: []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a")), n("n3", l("ib-b"), l("ib-b")), n("n4", l("ib-b"), l("ib-b"))},
			desired: map[string][]string{
				"n1": {"llmgw.llama"}, "n2": {"llmgw.llama"}, "n3": {"llmgw.llama"},
			},
			want: []string{
				"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.llama ActiveFeatures=ib-a,llmgw.llama",
				"scontrol update NodeName=n3 AvailableFeatures=ib-b,llmgw.llama ActiveFeatures=ib-b,llmgw.llama",
			},
			unchanged: 1,
		},
		{
			name:      "already right in another order: no call",
			nodes:     []Node{n("n1", l("llmgw.qwen", "ib-a", "llmgw.llama"), l("llmgw.llama", "ib-a", "llmgw.qwen"))},
			desired:   map[string][]string{"n1": {"llmgw.qwen", "llmgw.llama"}},
			unchanged: 1,
		},
		{
			name:    "stale or unknown to the coordinator: owned features go, the admin's stay",
			nodes:   []Node{n("n1", l("ib-a", "llmgw.llama", "big mem"), l("ib-a", "llmgw.llama"))},
			desired: map[string][]string{},
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures='ib-a,big mem' ActiveFeatures=ib-a"},
		},
		{
			name:    "an available-only admin feature stays available-only",
			nodes:   []Node{n("n1", l("ib-a", "gpu-boost"), l("ib-a"))},
			desired: map[string][]string{"n1": {"llmgw.llama"}},
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures=ib-a,gpu-boost,llmgw.llama ActiveFeatures=ib-a,llmgw.llama"},
		},
		{
			name: "wiped by reconfigure: everything back in one call per set",
			nodes: []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a")),
				n("n10", l("ib-a"), l("ib-a"))},
			desired: map[string][]string{"n1": {"llmgw.b", "llmgw.a"}, "n2": {"llmgw.a", "llmgw.b", "llmgw.a"}, "n10": {"llmgw.a", "llmgw.b"}},
			want:    []string{"scontrol update NodeName='n[1-2,10]' AvailableFeatures=ib-a,llmgw.a,llmgw.b ActiveFeatures=ib-a,llmgw.a,llmgw.b"},
		},
		{
			name:    "a node with no features left gets empty sets",
			nodes:   []Node{n("n1", l("llmgw.llama"), l("llmgw.llama"))},
			desired: nil,
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures= ActiveFeatures="},
		},
		{
			name:    "one owned feature swapped for another",
			nodes:   []Node{n("n1", l("ib-a", "llmgw.old"), l("ib-a", "llmgw.old"))},
			desired: map[string][]string{"n1": {"llmgw.new"}},
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures=ib-a,llmgw.new ActiveFeatures=ib-a,llmgw.new"},
		},
		{
			name:      "desired features without the prefix are not llmgw's to add",
			nodes:     []Node{n("n1", l("ib-a"), l("ib-a"))},
			desired:   map[string][]string{"n1": {"ib-b", "llmgw."}},
			unchanged: 1,
		},
		{
			name:      "nodes Slurm does not list are reported, not called",
			nodes:     []Node{n("n1", nil, nil)},
			desired:   map[string][]string{"gpu7": {"llmgw.llama"}, "gpu3": {"llmgw.llama"}, "gpu9": nil},
			unchanged: 1,
			unknown:   []string{"gpu3", "gpu7"},
		},
		{
			name:    "an admin feature that only looks similar is kept",
			nodes:   []Node{n("n1", l("llmgw", "llmgwx.a", "LLMGW.a"), l("llmgw"))},
			desired: map[string][]string{"n1": {"llmgw.a"}},
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures=llmgw,llmgwx.a,LLMGW.a,llmgw.a ActiveFeatures=llmgw,llmgw.a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := PlanFeatures(tc.nodes, p, tc.desired)
			if got := plan.Commands(); !slices.Equal(got, tc.want) {
				t.Errorf("commands:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if plan.Unchanged != tc.unchanged {
				t.Errorf("Unchanged = %d, want %d", plan.Unchanged, tc.unchanged)
			}
			if !slices.Equal(plan.Unknown, tc.unknown) {
				t.Errorf("Unknown = %q, want %q", plan.Unknown, tc.unknown)
			}
			if got, want := plan.Drifted()+plan.Unchanged, len(tc.nodes); got != want {
				t.Errorf("Drifted+Unchanged = %d, want every node (%d)", got, want)
			}
		})
	}
}

// TestPlanFeaturesIsAFixedPoint: applying a plan to the nodes it was made
// from yields nodes the same plan leaves alone, for every node at once.
func TestPlanFeaturesIsAFixedPoint(t *testing.T) {
	nodes := []Node{
		n("n1", l("ib-a", "llmgw.x"), l("ib-a")),
		n("n2", l("ib-a"), l("ib-a")),
		n("n3", l("llmgw.y", "ib-b"), l("llmgw.y", "ib-b")),
		n("n4", nil, nil),
	}
	desired := map[string][]string{"n1": {"llmgw.x"}, "n2": {"llmgw.x", "llmgw.y"}, "n4": {"llmgw.y"}}
	plan := PlanFeatures(nodes, "llmgw.", desired)
	set := map[string]FeatureUpdate{}
	for _, u := range plan.Updates {
		for _, name := range u.Nodes {
			set[name] = u
		}
	}
	after := slices.Clone(nodes)
	for i := range after {
		if u, ok := set[after[i].Name]; ok {
			after[i].Available, after[i].Active = u.Available, u.Active
		}
	}
	again := PlanFeatures(after, "llmgw.", desired)
	if len(again.Updates) != 0 || again.Unchanged != len(nodes) {
		t.Fatalf("after applying the plan, a new plan still has %q", again.Commands())
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"n[1-2]":    "'n[1-2]'",
		"a,b":       "a,b",
		"":          "",
		"it's":      `'it'\''s'`,
		"a b":       "'a b'",
		"org/model": "org/model",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseNodesJSON(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "22.05", "sinfo-json-features.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNodesJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	// Captured on the dev cluster after
	// scontrol update NodeName=n2 AvailableFeatures=ib-a,llmgw.llama,'a b' ActiveFeatures=ib-a,llmgw.llama
	want := []Node{
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug")},
		{Name: "n2", Available: l("ib-a", "llmgw.llama", "a b"), Active: l("ib-a", "llmgw.llama"), State: "idle", Partitions: l("debug")},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug")},
		{Name: "n4", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodesJSON =\n  %q\nwant\n  %q", got, want)
	}
}

// TestParseNodesJSONStates: n2 and n3 drained, n4 down with a feature set
// by scontrol, and two never-registered nodes (LLMGW_DEV_EXTRA_NODES=2)
// in a partition of their own. sinfo's %T said, at the same moment:
// idle, drained, drained, down, unknown, unknown.
func TestParseNodesJSONStates(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "22.05", "sinfo-json-states.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNodesJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug")},
		{Name: "n2", Available: l("ib-a"), Active: l("ib-a"), State: "drained", Partitions: l("debug")},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "drained", Partitions: l("debug")},
		{Name: "n4", Available: l("ib-b", "llmgw.qwen"), Active: l("ib-b", "llmgw.qwen"), State: "down", Partitions: l("debug")},
		{Name: "x0001", State: "unknown", Partitions: l("extra")},
		{Name: "x0002", State: "unknown", Partitions: l("extra")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodesJSON =\n  %q\nwant\n  %q", got, want)
	}
}

func TestParseNodesJSONErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, errPart string }{
		{"not JSON", "slurm_load_node: Unable to contact slurm controller", "parse sinfo --json"},
		{"no nodes list", `{"meta":{"slurm":{"release":"24.11.5"}}}`, `(Slurm 24.11.5): neither a "nodes" nor a "sinfo" list`},
		{"errors from Slurm", `{"errors":[{"error":"boom"}],"nodes":[]}`, "boom"},
		{"node without a name", `{"nodes":[{"state":"idle"}]}`, "no name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNodesJSON([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("ParseNodesJSON(%q) error = %v, want one containing %q", tc.in, err, tc.errPart)
			}
		})
	}
	got, err := ParseNodesJSON([]byte(`{"nodes":[]}`))
	if err != nil || len(got) != 0 {
		t.Errorf("empty cluster: %v, %v", got, err)
	}
}

func TestStateLong(t *testing.T) {
	for _, tc := range []struct {
		base  string
		flags []string
		want  string
	}{
		{"IDLE", nil, "idle"},
		{"idle", []string{"DRAIN"}, "drained"},
		{"down", []string{"DRAIN"}, "drained"},
		{"allocated", []string{"DRAIN"}, "draining"},
		{"mixed", []string{"DRAIN"}, "draining"},
		{"idle", []string{"NOT_RESPONDING"}, "idle*"},
		{"down", []string{"NOT_RESPONDING"}, "down*"},
		{"unknown", []string{"NOT_RESPONDING"}, "unknown*"},
		{"idle", []string{"FAIL"}, "fail"},
		{"allocated", []string{"FAIL"}, "failing"},
		{"idle", []string{"COMPLETING"}, "completing"},
		{"mixed", nil, "mixed"},
		// Slurm's node_state_string, which %T prints, for the flags that
		// decide placement.Schedulable:
		{"idle", []string{"INVALID_REG"}, "inval"},
		{"idle", []string{"REBOOT_REQUESTED"}, "reboot"},
		{"down", []string{"REBOOT_ISSUED"}, "reboot^"},
		{"mixed", []string{"REBOOT_REQUESTED"}, "mixed@"},
		{"idle", []string{"MAINTENANCE"}, "maint"},
		{"allocated", []string{"MAINTENANCE"}, "allocated$"},
		{"idle", []string{"POWERED_DOWN"}, "idle~"},
		{"idle", []string{"POWERING_UP"}, "idle#"},
		{"idle", []string{"DRAIN", "POWERED_DOWN"}, "drained~"},
		{"allocated", []string{"COMPLETING"}, "allocated+"},
		{"down", []string{"COMPLETING"}, "down"},
		{"idle", []string{"POWERED_DOWN", "NOT_RESPONDING"}, "idle~"},
	} {
		if got := stateLong(tc.base, tc.flags); got != tc.want {
			t.Errorf("stateLong(%q, %q) = %q, want %q", tc.base, tc.flags, got, tc.want)
		}
	}
}

func TestNodeLess(t *testing.T) {
	names := []string{"n10", "gpu2", "n2", "n", "n1", "gpu10", "login"}
	SortNodeNames(names)
	if want := l("gpu2", "gpu10", "login", "n", "n1", "n2", "n10"); !slices.Equal(names, want) {
		t.Errorf("sorted %q, want %q", names, want)
	}
}

// TestApplyFeaturesReadsBack runs ApplyFeatures against scripts standing in
// for scontrol and sinfo: the second call fails the way a bad name in a list
// does (exit 1, the rest applied), and the read-back shows one node not as
// planned. The real behaviour is exercised on the cluster
// (features_integration_test.go); this pins the bookkeeping.
func TestApplyFeaturesReadsBack(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	fixture, _ := filepath.Abs(filepath.Join("testdata", "22.05", "sinfo-json-features.json"))
	dir := fakeSlurm(t, map[string]string{
		"scontrol": `echo "$*" >>'` + log + `'
case "$*" in *n3*) echo "slurm_update error: Invalid node name specified" >&2; exit 1;; esac`,
		"sinfo": `exec cat '` + fixture + `'`,
	})
	r := &Runner{Dir: dir}
	plan := FeaturePlan{Updates: []FeatureUpdate{
		// The fixture has n2 with these: read back right.
		{Nodes: l("n2"), Available: l("ib-a", "llmgw.llama", "a b"), Active: l("ib-a", "llmgw.llama")},
		// The fixture's n3 has ib-b only: read back wrong.
		{Nodes: l("n3", "nosuch"), Available: l("ib-b", "llmgw.qwen"), Active: l("ib-b", "llmgw.qwen")},
	}}
	res := r.ApplyFeatures(context.Background(), plan)
	if res.Calls != 2 || len(res.Errors) != 1 {
		t.Fatalf("Calls = %d, Errors = %v; want 2 calls, 1 error", res.Calls, res.Errors)
	}
	if !slices.Equal(res.Wrong, l("n3", "nosuch")) {
		t.Errorf("Wrong = %q, want n3 and nosuch", res.Wrong)
	}
	if len(res.Nodes) != 4 || res.ReadErr != nil {
		t.Errorf("read back %d nodes, %v", len(res.Nodes), res.ReadErr)
	}
	err := res.Err()
	if err == nil || !strings.Contains(err.Error(), "Invalid node name") || !strings.Contains(err.Error(), "n3,nosuch") {
		t.Errorf("Err() = %v", err)
	}
	calls, _ := os.ReadFile(log)
	want := "update NodeName=n2 AvailableFeatures=ib-a,llmgw.llama,a b ActiveFeatures=ib-a,llmgw.llama\n" +
		"update NodeName=n3,nosuch AvailableFeatures=ib-b,llmgw.qwen ActiveFeatures=ib-b,llmgw.qwen\n"
	if string(calls) != want {
		t.Errorf("scontrol got\n%s\nwant\n%s", calls, want)
	}

	// Nothing to do: no call and no read.
	if res := r.ApplyFeatures(context.Background(), FeaturePlan{Unchanged: 4}); res.Calls != 0 || res.Nodes != nil || res.Err() != nil {
		t.Errorf("empty plan: %+v", res)
	}
}

func TestRunnerPaths(t *testing.T) {
	dir := fakeSlurm(t, map[string]string{"my-sinfo": `echo '{"nodes":[{"name":"x1","state":"idle"}]}'`})
	r := &Runner{Dir: "/nonexistent", Paths: map[string]string{"sinfo": filepath.Join(dir, "my-sinfo")}}
	nodes, err := r.Nodes(context.Background())
	if err != nil || len(nodes) != 1 || nodes[0].Name != "x1" {
		t.Fatalf("Nodes through Paths: %v, %v", nodes, err)
	}
	r.Paths["sinfo"] = "relative/sinfo"
	if _, err := r.Nodes(context.Background()); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("relative path: %v", err)
	}
}
