package slurm

import (
	"context"
	"fmt"
	"math/rand/v2"
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
		offered   []string            // kept on every node (what llmgw did before it offered per record)
		keep      map[string][]string // kept on the nodes named
		want      []string            // the commands
		unchanged int
		unknown   []string
	}{
		{
			name:      "nothing desired, nothing offered, nothing owned: no call",
			nodes:     []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", nil, nil)},
			unchanged: 2,
		},
		{
			name: "first sync: the superset per record, with what its nodes share active; the rest as presence",
			nodes: []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a")),
				n("n3", l("ib-b"), l("ib-b")), n("n4", l("ib-b"), l("ib-b"))},
			desired: map[string][]string{"n1": {"llmgw.llama"}, "n2": {"llmgw.llama"}, "n3": {"llmgw.llama"}},
			offered: l("llmgw.qwen", "llmgw.llama"),
			want: []string{
				"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.llama,llmgw.qwen ActiveFeatures=ib-a,llmgw.llama",
				"scontrol update NodeName='n[3-4]' AvailableFeatures=ib-b,llmgw.llama,llmgw.qwen ActiveFeatures=ib-b",
				"scontrol update NodeName=n3 ActiveFeatures=ib-b,llmgw.llama",
			},
		},
		{
			name: "steady state: a node that got a model gets an active set, nothing else is written",
			nodes: []Node{n("n1", l("ib-a", "llmgw.llama", "llmgw.qwen"), l("ib-a", "llmgw.llama")),
				n("n2", l("ib-a", "llmgw.llama", "llmgw.qwen"), l("ib-a"))},
			desired:   map[string][]string{"n1": {"llmgw.llama", "llmgw.qwen"}},
			offered:   l("llmgw.llama", "llmgw.qwen"),
			want:      []string{"scontrol update NodeName=n1 ActiveFeatures=ib-a,llmgw.llama,llmgw.qwen"},
			unchanged: 1,
		},
		{
			name: "random presence: one call per distinct active set, the record left alone",
			nodes: []Node{n("n1", l("llmgw.a", "llmgw.b"), nil), n("n2", l("llmgw.a", "llmgw.b"), nil),
				n("n3", l("llmgw.a", "llmgw.b"), nil), n("n4", l("llmgw.a", "llmgw.b"), nil)},
			desired: map[string][]string{"n1": {"llmgw.b", "llmgw.a"}, "n2": {"llmgw.a"}, "n3": {"llmgw.b"}, "n4": {"llmgw.a"}},
			offered: l("llmgw.a", "llmgw.b"),
			want: []string{
				"scontrol update NodeName=n1 ActiveFeatures=llmgw.a,llmgw.b",
				"scontrol update NodeName='n[2,4]' ActiveFeatures=llmgw.a",
				"scontrol update NodeName=n3 ActiveFeatures=llmgw.b",
			},
		},
		{
			name:      "already right in another order: no call",
			nodes:     []Node{n("n1", l("llmgw.qwen", "ib-a", "llmgw.llama"), l("llmgw.llama", "ib-a", "llmgw.qwen"))},
			desired:   map[string][]string{"n1": {"llmgw.qwen", "llmgw.llama"}},
			offered:   l("llmgw.llama", "llmgw.qwen"),
			unchanged: 1,
		},
		{
			name:    "stale or unknown to the coordinator: the owned active features go, the superset and the admin's stay",
			nodes:   []Node{n("n1", l("ib-a", "llmgw.llama", "big mem"), l("ib-a", "llmgw.llama"))},
			desired: map[string][]string{},
			offered: l("llmgw.llama"),
			want:    []string{"scontrol update NodeName=n1 ActiveFeatures=ib-a"},
		},
		{
			name:    "an available-only admin feature stays available-only",
			nodes:   []Node{n("n1", l("ib-a", "gpu-boost"), l("ib-a"))},
			desired: map[string][]string{"n1": {"llmgw.llama"}},
			offered: l("llmgw.llama"),
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures=ib-a,gpu-boost,llmgw.llama ActiveFeatures=ib-a,llmgw.llama"},
		},
		{
			name: "wiped by reconfigure: each record back in one call, the nodes whose presence differs after it",
			nodes: []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a")),
				n("n10", l("ib-a"), l("ib-a"))},
			desired: map[string][]string{"n1": {"llmgw.b", "llmgw.a"}, "n2": {"llmgw.a", "llmgw.b", "llmgw.a"}, "n10": {"llmgw.a"}},
			offered: l("llmgw.a", "llmgw.b", "llmgw.c"),
			want: []string{
				"scontrol update NodeName='n[1-2,10]' AvailableFeatures=ib-a,llmgw.a,llmgw.b,llmgw.c ActiveFeatures=ib-a,llmgw.a",
				"scontrol update NodeName='n[1-2]' ActiveFeatures=ib-a,llmgw.a,llmgw.b",
			},
		},
		{
			name:    "a model gone from the catalog leaves the superset, with the record",
			nodes:   []Node{n("n1", l("ib-a", "llmgw.old", "llmgw.new"), l("ib-a")), n("n2", l("llmgw.old", "ib-a", "llmgw.new"), l("ib-a"))},
			offered: l("llmgw.new"),
			want:    []string{"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.new ActiveFeatures=ib-a"},
		},
		{
			name:    "records with the same set in another order are written together, whole",
			nodes:   []Node{n("n1", l("ib-a", "nvme"), l("ib-a", "nvme")), n("n2", l("nvme", "ib-a"), l("nvme", "ib-a"))},
			offered: l("llmgw.m"),
			want:    []string{"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,nvme,llmgw.m ActiveFeatures=ib-a,nvme"},
		},
		{
			name:    "a desired model not offered is offered to its record anyway",
			nodes:   []Node{n("n1", nil, nil), n("n2", nil, nil), n("n3", l("ib-b"), l("ib-b"))},
			desired: map[string][]string{"n1": {"llmgw.x"}},
			want: []string{
				"scontrol update NodeName='n[1-2]' AvailableFeatures=llmgw.x ActiveFeatures=",
				"scontrol update NodeName=n1 ActiveFeatures=llmgw.x",
			},
			unchanged: 1,
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
			name: "each record offers what its nodes hold, not the catalog",
			nodes: []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a")),
				n("n3", l("ib-b"), l("ib-b")), n("n4", l("ib-b"), l("ib-b"))},
			desired: map[string][]string{"n1": {"llmgw.a"}, "n3": {"llmgw.b"}, "n4": {"llmgw.b", "llmgw.c"}},
			want: []string{
				"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.a ActiveFeatures=ib-a",
				"scontrol update NodeName='n[3-4]' AvailableFeatures=ib-b,llmgw.b,llmgw.c ActiveFeatures=ib-b,llmgw.b",
				"scontrol update NodeName=n1 ActiveFeatures=ib-a,llmgw.a",
				"scontrol update NodeName=n4 ActiveFeatures=ib-b,llmgw.b,llmgw.c",
			},
		},
		{
			name:      "a model its record keeps (held a while ago) stays offered: no write",
			nodes:     []Node{n("n1", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a", "llmgw.a")), n("n2", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a"))},
			desired:   map[string][]string{"n1": {"llmgw.a"}},
			keep:      map[string][]string{"n2": {"llmgw.b"}},
			unchanged: 2,
		},
		{
			name:    "a model no node of the record holds or keeps leaves it",
			nodes:   []Node{n("n1", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a", "llmgw.a")), n("n2", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a"))},
			desired: map[string][]string{"n1": {"llmgw.a"}},
			want: []string{
				"scontrol update NodeName='n[1-2]' AvailableFeatures=ib-a,llmgw.a ActiveFeatures=ib-a",
				"scontrol update NodeName=n1 ActiveFeatures=ib-a,llmgw.a",
			},
		},
		{
			name: "unlisted nodes (FUTURE, in no partition) of a record are in its write",
			nodes: []Node{n("x1", nil, nil), {Name: "x2", State: "FUTURE", Unlisted: true},
				{Name: "x3", State: "FUTURE", Unlisted: true}, n("n1", l("ib-a"), l("ib-a"))},
			desired: map[string][]string{"x1": {"llmgw.a"}},
			want: []string{
				"scontrol update NodeName='x[1-3]' AvailableFeatures=llmgw.a ActiveFeatures=",
				"scontrol update NodeName=x1 ActiveFeatures=llmgw.a",
			},
			unchanged: 1,
		},
		{
			name:    "an admin feature that only looks similar is kept",
			nodes:   []Node{n("n1", l("llmgw", "llmgwx.a", "LLMGW.a"), l("llmgw"))},
			desired: map[string][]string{"n1": {"llmgw.a"}},
			offered: l("llmgw.a"),
			want:    []string{"scontrol update NodeName=n1 AvailableFeatures=llmgw,llmgwx.a,LLMGW.a,llmgw.a ActiveFeatures=llmgw,llmgw.a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keep := everyNode(tc.nodes, tc.offered)
			for node, fs := range tc.keep {
				keep[node] = append(keep[node], fs...)
			}
			plan := PlanFeatures(tc.nodes, p, tc.desired, keep)
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
			checkWholeRecords(t, tc.nodes, plan)
		})
	}
}

// everyNode keeps offered on every node: every record offers them.
func everyNode(nodes []Node, offered []string) map[string][]string {
	out := map[string][]string{}
	for _, nd := range nodes {
		out[nd.Name] = slices.Clone(offered)
	}
	return out
}

// checkWholeRecords fails unless every AvailableFeatures write of plan
// covers every node that had, before it, the available set of any node it
// covers: slurmctld's config records, as far as sinfo shows them.
func checkWholeRecords(t *testing.T, nodes []Node, plan FeaturePlan) {
	t.Helper()
	bySet := map[string][]string{}
	for _, nd := range nodes {
		k := setKey(nd.Available)
		bySet[k] = append(bySet[k], nd.Name)
	}
	before := map[string]string{}
	for _, nd := range nodes {
		before[nd.Name] = setKey(nd.Available)
	}
	for _, u := range plan.Presence {
		if u.Record {
			t.Errorf("presence call %s writes AvailableFeatures", u)
		}
	}
	for _, u := range plan.Records {
		for _, name := range u.Nodes {
			for _, other := range bySet[before[name]] {
				if !slices.Contains(u.Nodes, other) {
					t.Errorf("%s covers %s but not %s, which had the same available set: it would split a config record", u, name, other)
				}
			}
		}
	}
}

// TestPlanFeaturesIsAFixedPoint: applying a plan to the nodes it was made
// from yields nodes the same plan leaves alone, for every node at once;
// every active set is within its available one at every step (Slurm
// refuses one that is not); and on a cluster of random presence, the
// calls are one per record whose set changes plus one per distinct
// presence set, the records stay whole, and a second sync after a change
// of presence writes no AvailableFeatures at all.
func TestPlanFeaturesIsAFixedPoint(t *testing.T) {
	nodes := []Node{
		n("n1", l("ib-a", "llmgw.x"), l("ib-a")),
		n("n2", l("ib-a"), l("ib-a")),
		n("n3", l("llmgw.y", "ib-b"), l("llmgw.y", "ib-b")),
		n("n4", nil, nil),
	}
	desired := map[string][]string{"n1": {"llmgw.x"}, "n2": {"llmgw.x", "llmgw.y"}, "n4": {"llmgw.y"}}
	check := func(nodes []Node, desired map[string][]string, offered []string) []Node {
		t.Helper()
		plan := PlanFeatures(nodes, "llmgw.", desired, everyNode(nodes, offered))
		checkWholeRecords(t, nodes, plan)
		after := slices.Clone(nodes)
		at := map[string]int{}
		for i, nd := range after {
			at[nd.Name] = i
		}
		for _, u := range plan.Updates() {
			for _, name := range u.Nodes {
				i := at[name]
				if u.Record {
					after[i].Available = u.Available
				}
				after[i].Active = u.Active
				for _, f := range after[i].Active {
					if !slices.Contains(after[i].Available, f) {
						t.Fatalf("%s leaves %s active but not available on %s", u, f, name)
					}
				}
			}
		}
		again := PlanFeatures(after, "llmgw.", desired, everyNode(after, offered))
		if len(again.Updates()) != 0 || again.Unchanged != len(nodes) {
			t.Fatalf("after applying the plan, a new plan still has %q", again.Commands())
		}
		return after
	}
	check(nodes, desired, l("llmgw.x", "llmgw.y"))

	rng := rand.New(rand.NewPCG(1, 2))
	var big []Node
	random := func() map[string][]string {
		d := map[string][]string{}
		for i := range 2000 {
			for range rng.IntN(7) {
				name := fmt.Sprintf("g%04d", i)
				d[name] = append(d[name], fmt.Sprintf("llmgw.m%02d", rng.IntN(50)))
			}
		}
		return d
	}
	var offered []string
	for m := range 50 {
		offered = append(offered, fmt.Sprintf("llmgw.m%02d", m))
	}
	for i := range 2000 {
		f := fmt.Sprintf("ib-%d", i/250)
		big = append(big, n(fmt.Sprintf("g%04d", i), l(f), l(f)))
	}
	d := random()
	plan := PlanFeatures(big, "llmgw.", d, everyNode(big, offered))
	sets := map[string]bool{}
	for _, nd := range big {
		sets[nd.Available[0]+"|"+setKey(d[nd.Name])] = true
	}
	if len(plan.Records) != 8 {
		t.Errorf("%d record writes on 8 records", len(plan.Records))
	}
	if got, most := len(plan.Presence), len(sets); got > most {
		t.Errorf("%d presence calls for %d distinct sets", got, most)
	}
	after := check(big, d, offered)
	plan = PlanFeatures(after, "llmgw.", random(), everyNode(after, offered))
	if len(plan.Records) != 0 || len(plan.Presence) == 0 {
		t.Errorf("a change of presence wrote %d records and %d active sets; want none and some", len(plan.Records), len(plan.Presence))
	}
	check(after, random(), offered)
}

// TestPlanBetween: while the plan runs a node is sure to hold only what it
// held and every call that covers it sets; lost says so when that is less
// than it had of llmgw's.
func TestPlanBetween(t *testing.T) {
	nodes := []Node{
		n("n1", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a", "llmgw.a", "llmgw.b")),
		n("n2", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a", "llmgw.a")),
		n("n3", l("ib-b"), l("ib-b")),
	}
	desired := map[string][]string{"n1": {"llmgw.a", "llmgw.b"}, "n2": {"llmgw.a"}}
	// A new model: every record is written, with what its nodes share.
	plan := PlanFeatures(nodes, "llmgw.", desired, everyNode(nodes, l("llmgw.a", "llmgw.b", "llmgw.c")))
	between, lost := plan.Between("llmgw.")
	if !lost {
		t.Errorf("n1 loses llmgw.b between the writes, but lost is false")
	}
	if got := fmt.Sprint(between[0].Active, between[1].Active, between[2].Active); got != "[ib-a llmgw.a] [ib-a llmgw.a] [ib-b]" {
		t.Errorf("between: %s", got)
	}
	// After a wipe nothing of llmgw's is there to lose.
	wiped := []Node{n("n1", l("ib-a"), l("ib-a")), n("n2", l("ib-a"), l("ib-a"))}
	if _, lost := PlanFeatures(wiped, "llmgw.", desired, everyNode(wiped, l("llmgw.a", "llmgw.b"))).Between("llmgw."); lost {
		t.Errorf("after a wipe: lost")
	}
	// A node that lost a model loses its feature with its presence call:
	// until then the file must not promise it. One that gains one is not
	// promised it before Slurm has it either.
	steady := []Node{
		n("n1", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a", "llmgw.a", "llmgw.b")),
		n("n2", l("ib-a", "llmgw.a", "llmgw.b"), l("ib-a")),
	}
	between, lost = PlanFeatures(steady, "llmgw.", map[string][]string{"n1": {"llmgw.a"}, "n2": {"llmgw.b"}}, everyNode(steady, l("llmgw.a", "llmgw.b"))).Between("llmgw.")
	if got := fmt.Sprint(between[0].Active, between[1].Active); !lost || got != "[ib-a llmgw.a] [ib-a]" {
		t.Errorf("n1 losing llmgw.b, n2 gaining it: between %s, lost %v", got, lost)
	}
	if _, lost := PlanFeatures(steady, "llmgw.", map[string][]string{"n1": {"llmgw.a", "llmgw.b"}, "n2": {"llmgw.b"}}, everyNode(steady, l("llmgw.a", "llmgw.b"))).Between("llmgw."); lost {
		t.Errorf("only a gain: lost")
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
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n2", Available: l("ib-a", "llmgw.llama", "a b"), Active: l("ib-a", "llmgw.llama"), State: "idle", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n4", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodesJSON =\n  %+v\nwant\n  %+v", got, want)
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
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n2", Available: l("ib-a"), Active: l("ib-a"), State: "drained", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "drained", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "n4", Available: l("ib-b", "llmgw.qwen"), Active: l("ib-b", "llmgw.qwen"), State: "down", Partitions: l("debug"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "x0001", State: "unknown", Partitions: l("extra"), Addr: "127.0.0.1", Hostname: "localhost"},
		{Name: "x0002", State: "unknown", Partitions: l("extra"), Addr: "127.0.0.1", Hostname: "localhost"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodesJSON =\n  %+v\nwant\n  %+v", got, want)
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
		"scontrol": fakeScontrol(log, `case "$*" in *n3*) echo "slurm_update error: Invalid node name specified" >&2; return 1;; esac`),
		"sinfo":    `exec cat '` + fixture + `'`,
	})
	r := &Runner{Dir: dir}
	plan := FeaturePlan{Records: []FeatureUpdate{
		// The fixture has n2 with these: read back right. A feature with
		// a space: scontrol run as a process of its own, not the session.
		{Record: true, Nodes: l("n2"), Available: l("ib-a", "llmgw.llama", "a b"), Active: l("ib-a", "llmgw.llama")},
		// The fixture's n3 has ib-b only: read back wrong.
		{Record: true, Nodes: l("n3", "nosuch"), Available: l("ib-b", "llmgw.qwen"), Active: l("ib-b")},
	}, Presence: []FeatureUpdate{
		// n3's record write failed: its presence is not tried.
		{Nodes: l("n3"), Active: l("ib-b", "llmgw.qwen")},
	}}
	res := r.ApplyFeatures(context.Background(), plan, &Pacer{Share: 1})
	if res.Calls != 2 || len(res.Errors) != 1 {
		t.Fatalf("Calls = %d, Errors = %v; want 2 calls, 1 error", res.Calls, res.Errors)
	}
	if res.Pace.Calls != 2 {
		t.Errorf("the pacer saw %d calls, want 2", res.Pace.Calls)
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
	want := "args: update NodeName=n2 AvailableFeatures=ib-a,llmgw.llama,a b ActiveFeatures=ib-a,llmgw.llama\n" +
		"line: update NodeName=n3,nosuch AvailableFeatures=ib-b,llmgw.qwen ActiveFeatures=ib-b\n"
	if string(calls) != want {
		t.Errorf("scontrol got\n%s\nwant\n%s", calls, want)
	}

	// Nothing to do: no call and no read.
	if res := r.ApplyFeatures(context.Background(), FeaturePlan{Unchanged: 4}, nil); res.Calls != 0 || res.Nodes != nil || res.Err() != nil {
		t.Errorf("empty plan: %+v", res)
	}
}

// fakeScontrol is a script standing in for scontrol, with args and in
// interactive mode as a Session drives it: each update is logged to log
// ("args: …" or "line: …") and passed to the shell function body (its
// arguments the update's words), which may print an error and return 1;
// any other line is answered as scontrol answers a word that is no
// keyword.
func fakeScontrol(log, body string) string {
	return `handle() {
` + body + `
return 0
}
if [ $# -gt 0 ]; then echo "args: $*" >>'` + log + `'; handle "$@"; exit $?; fi
while IFS= read -r line; do
	case "$line" in
	update*) echo "line: $line" >>'` + log + `'; handle $line ;;
	*) echo "invalid keyword: $line" >&2 ;;
	esac
done`
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

// TestApplyFeaturesReadsBackGrouped: after the calls the nodes are read
// the way the plan's were (ReadNodes): every node's active set, state and
// partitions, one line each, and the available sets grouped by sinfo only
// when a record was written, else as the plan had them; whenever the text
// form could mislead, every node is read whole (--json) instead.
func TestApplyFeaturesReadsBackGrouped(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sinfo-calls")
	fixture, _ := filepath.Abs(filepath.Join("testdata", "22.05", "sinfo-json-features.json"))
	list := filepath.Join(t.TempDir(), "list")
	sets := filepath.Join(t.TempDir(), "sets")
	dir := fakeSlurm(t, map[string]string{
		"scontrol": fakeScontrol(os.DevNull, ""),
		"sinfo": `echo "$*" >>'` + log + `'
case "$*" in *--json*) exec cat '` + fixture + `';; *"-N -h -o"*) exec cat '` + list + `';; *%f*) exec cat '` + sets + `';; esac
echo 'debug*'`,
	})
	r := &Runner{Dir: dir}
	from := []Node{
		{Name: "n1", Available: l("ib-a", "llmgw.m1"), Active: l("ib-a"), State: "idle", Partitions: l("debug")},
		{Name: "n2", Available: l("ib-a", "llmgw.m1"), Active: l("ib-a"), State: "idle", Partitions: l("debug", "p2")},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug")},
	}
	run := func(listOut, setsOut string, plan FeaturePlan) (FeatureResult, string) {
		t.Helper()
		os.WriteFile(list, []byte(listOut), 0o644)
		os.WriteFile(sets, []byte(setsOut), 0o644)
		os.Remove(log)
		res := r.ApplyFeatures(context.Background(), plan, &Pacer{Share: 1})
		calls, _ := os.ReadFile(log)
		return res, string(calls)
	}

	// Presence alone: one line a node, the available sets as planned.
	presence := PlanFeatures(from, "llmgw.", map[string][]string{"n2": l("llmgw.m1")}, nil)
	if len(presence.Records) != 0 {
		t.Fatalf("want a plan without record writes: %q", presence.Commands())
	}
	res, calls := run("n1|ib-a|idle|debug*|a1|h1\nn2|ib-a,llmgw.m1|mixed|debug*|a2|h2\nn2|ib-a,llmgw.m1|mixed|p2|a2|h2\nn3|ib-b|idle|debug*|a3|h3\n", "", presence)
	if want := "-a -N -h -o %N|%b|%T|%P|%o|%n\n"; calls != want {
		t.Errorf("sinfo calls %q, want only %q", calls, want)
	}
	if res.Err() != nil || len(res.Wrong) != 0 {
		t.Errorf("read back: %v", res.Err())
	}
	want := []Node{
		{Name: "n1", Available: l("ib-a", "llmgw.m1"), Active: l("ib-a"), State: "idle", Partitions: l("debug"), Addr: "a1", Hostname: "h1"},
		{Name: "n2", Available: l("ib-a", "llmgw.m1"), Active: l("ib-a", "llmgw.m1"), State: "mixed", Partitions: l("debug", "p2"), Addr: "a2", Hostname: "h2"},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug"), Addr: "a3", Hostname: "h3"},
	}
	if fmt.Sprint(res.Nodes) != fmt.Sprint(want) {
		t.Errorf("nodes after the read-back\n %+v\nwant\n %+v", res.Nodes, want)
	}

	// A record written: the available sets read again, grouped.
	record := PlanFeatures(from, "llmgw.", map[string][]string{"n3": l("llmgw.m1")}, nil)
	if len(record.Records) != 2 {
		t.Fatalf("want two record writes: %q", record.Commands())
	}
	res, calls = run("n1|ib-a|idle|debug*|a|h\nn2|ib-a|idle|debug*|a|h\nn3|ib-b,llmgw.m1|idle|debug*|a|h\n",
		"n[1-2]|ib-a\nn3|ib-b,llmgw.m1\n|(null)\n", record)
	if want := "-a -N -h -o %N|%b|%T|%P|%o|%n\n-a -h -o %N|%f\n"; calls != want {
		t.Errorf("sinfo calls %q, want %q", calls, want)
	}
	if res.Err() != nil || len(res.Wrong) != 0 || fmt.Sprint(res.Nodes[2].Available) != "[ib-b llmgw.m1]" {
		t.Errorf("read back: %v, %+v", res.Err(), res.Nodes)
	}

	// A node the plan did not know: its set is read, grouped.
	_, calls = run("n1|ib-a|idle|debug*|a|h\nn2|ib-a,llmgw.m1|idle|debug*|a|h\nn3|ib-b|idle|debug*|a|h\nn9|(null)|idle|debug*|a|h\n",
		"n[1-2]|ib-a,llmgw.m1\nn3|ib-b\nn9|(null)\n", presence)
	if !strings.Contains(calls, "%N|%f") {
		t.Errorf("a node the plan did not know: sinfo calls %q; want the available sets read", calls)
	}
	// A feature with the text form's separator: every node whole, --json.
	if _, calls := run("n1|ib-a|idle|debug*|a|h\nn2|ib-a,odd|one|mixed|debug*|a|h\n", "", presence); !strings.Contains(calls, "--json") {
		t.Errorf("a feature with '|': sinfo calls %q; want the --json read", calls)
	}
}

// TestApplyFeaturesStopsWhenSlurmIsGone: a controller that fails call
// after call is not asked the rest of a plan of thousands: the next sync
// makes them.
func TestApplyFeaturesStopsWhenSlurmIsGone(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	dir := fakeSlurm(t, map[string]string{
		"scontrol": fakeScontrol(log, `echo "slurm_update error: Unable to contact slurm controller (connect failure)" >&2; return 1`),
		"sinfo":    `exit 1`,
	})
	var plan FeaturePlan
	for i := range 100 {
		plan.Presence = append(plan.Presence, FeatureUpdate{Nodes: l(fmt.Sprintf("n%d", i)), Active: l("llmgw.a")})
	}
	res := (&Runner{Dir: dir}).ApplyFeatures(context.Background(), plan, &Pacer{Share: 1})
	if res.Calls != maxFailedInARow {
		t.Errorf("%d calls against a controller that is gone; want %d", res.Calls, maxFailedInARow)
	}
	if err := res.Err(); err == nil || !strings.Contains(err.Error(), "stopped after 5 failed calls in a row") {
		t.Errorf("Err() = %v", err)
	}
}

// TestPutBack: the calls that restore the nodes' features group nodes that
// had the same sets, set AvailableFeatures only where it changed, and leave
// alone nodes that did not change or are not in both lists.
func TestPutBack(t *testing.T) {
	before := []Node{
		{Name: "n1", Available: []string{"ib-a"}, Active: []string{"ib-a"}},
		{Name: "n2", Available: []string{"ib-a"}, Active: []string{"ib-a"}},
		{Name: "n3", Available: []string{"ib-b"}, Active: []string{"ib-b"}},
		{Name: "n4", Available: []string{"ib-b"}, Active: []string{"ib-b"}},
		{Name: "gone", Available: []string{"x"}, Active: []string{"x"}},
	}
	now := []Node{
		{Name: "n1", Available: []string{"ib-a", "llmgw.m"}, Active: []string{"ib-a", "llmgw.m"}},
		{Name: "n2", Available: []string{"ib-a", "llmgw.m"}, Active: []string{"ib-a"}},
		{Name: "n3", Available: []string{"ib-b"}, Active: []string{"ib-b", "llmgw.m"}},
		{Name: "n4", Available: []string{"ib-b"}, Active: []string{"ib-b"}},
		{Name: "new", Available: []string{"y"}, Active: []string{"y"}},
	}
	var got []string
	for _, u := range PutBack(before, now) {
		got = append(got, strings.Join(u.Args(), " "))
	}
	want := []string{
		"update NodeName=n[1-2] AvailableFeatures=ib-a ActiveFeatures=ib-a",
		"update NodeName=n3 ActiveFeatures=ib-b",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("PutBack:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
