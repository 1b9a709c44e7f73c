package placement

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

var (
	now        = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	staleAfter = 90 * time.Second
	stallAfter = time.Minute
)

const (
	GB     = int64(1e9)
	remote = "hf:org/repo/llama.gguf"
)

// node is a fresh node that looked, with a 100 GB cache of which free is
// free, and what it holds of model "llama".
type nodeOpt func(*Node)

func mk(name, fabric string, opts ...nodeOpt) *Node {
	n := &Node{Name: name, Fabric: fabric, Looked: true, Received: now.Add(-10 * time.Second),
		ReportTime: now.Add(-10 * time.Second), CacheFree: 50 * GB, CacheTotal: 100 * GB}
	for _, o := range opts {
		o(n)
	}
	return n
}

func local(model string) nodeOpt {
	return func(n *Node) {
		n.Holdings = append(n.Holdings, Holding{Model: model, Path: "/var/cache/llmgw/" + model, Size: 8 * GB, Complete: true})
	}
}

func shared(model string) nodeOpt {
	return func(n *Node) {
		n.Holdings = append(n.Holdings, Holding{Model: model, Path: "/lustre/" + model, Size: 8 * GB, Shared: true, Complete: true})
	}
}

func incomplete(model string) nodeOpt {
	return func(n *Node) {
		n.Holdings = append(n.Holdings, Holding{Model: model, Path: "/var/cache/llmgw/" + model, Problem: "missing part 2 of 2"})
	}
}

func free(b int64) nodeOpt        { return func(n *Node) { n.CacheFree = b } }
func noCacheInfo() nodeOpt        { return func(n *Node) { n.CacheFree, n.CacheTotal = 0, 0 } }
func gpu(b int64) nodeOpt         { return func(n *Node) { n.GPUMemory = b } }
func slurmState(s string) nodeOpt { return func(n *Node) { n.SlurmState = s } }
func neverLooked() nodeOpt        { return func(n *Node) { n.Looked = false } }
func staleNode() nodeOpt          { return func(n *Node) { n.Received = now.Add(-5 * time.Minute) } }
func unreported() nodeOpt         { return func(n *Node) { *n = Node{Name: n.Name} } }

func fetching(done, total int64, progressed time.Duration) nodeOpt {
	return func(n *Node) {
		n.Fetches = append(n.Fetches, Fetch{Source: remote, Done: done, Total: total, Rate: 1e8,
			Started: now.Add(-time.Hour), Progressed: n.ReportTime.Add(-progressed)})
	}
}

func req(m catalog.Model, count int) Request {
	fb := FetchBytes(m, 0)
	return Request{Model: m, Count: count, FetchBytes: fb, Now: now, StaleAfter: staleAfter, StallAfter: stallAfter}
}

const fetchesIt = "no usable node holds llama; a job fetches it"

var llama = catalog.Model{Name: "llama", Source: remote, Size: 8 * GB, GPUMemory: 20 * GB}

func TestRankSingleNode(t *testing.T) {
	tests := []struct {
		name  string
		model catalog.Model
		nodes []*Node
		// want is "node:tier" best first; holder lists the nodes that
		// count as holders, noRoom those failing the disk check.
		want        string
		holder      string
		noRoom      string
		choice      string
		mem, disk   map[string]Result
		note        string
		reasonParts map[string]string
	}{
		{
			name:   "local ahead of shared ahead of room",
			model:  llama,
			nodes:  []*Node{mk("n1", "a"), mk("n2", "a", shared("llama")), mk("n3", "a", local("llama"))},
			want:   "n3:holds-local n2:holds-shared n1:has-room",
			holder: "n3 n2", choice: "n3",
			disk: map[string]Result{"n1": Pass, "n2": Skip, "n3": Skip},
		},
		{
			name:   "a node with a local copy and a filer is a local holder",
			model:  llama,
			nodes:  []*Node{mk("n1", "a", shared("llama")), mk("n2", "a", shared("llama"), local("llama"))},
			want:   "n2:holds-local n1:holds-shared",
			holder: "n2 n1", choice: "n2",
		},
		{
			name:  "nobody holds it: fetching is a valid answer",
			model: llama,
			nodes: []*Node{mk("n2", "a"), mk("n1", "a")},
			want:  "n1:has-room n2:has-room", choice: "n1",
			note: fetchesIt,
		},
		{
			name:  "never looked ranks with looked-and-found-nothing",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n2", "a", neverLooked()), mk("n1", "a"), mk("n3", "a", neverLooked())},
			want:  "n1:has-room n2:has-room n3:has-room", choice: "n1",
		},
		{
			name:   "no room and no copy: last of the fresh, and flagged",
			model:  llama,
			nodes:  []*Node{mk("n1", "a", free(1*GB)), mk("n2", "a"), mk("n3", "a", free(1*GB), local("llama"))},
			want:   "n3:holds-local n2:has-room n1:no-room",
			holder: "n3", noRoom: "n1", choice: "n3",
			disk: map[string]Result{"n1": Fail, "n2": Pass, "n3": Skip},
		},
		{
			name:  "room exactly the size passes",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n1", "a", free(8*GB))},
			want:  "n1:has-room", choice: "n1",
			disk: map[string]Result{"n1": Pass},
		},
		{
			name:  "unknown room is not excluded, ranks after known room",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n1", "a", noCacheInfo()), mk("n2", "a")},
			want:  "n2:has-room n1:unchecked", choice: "n2",
			disk:        map[string]Result{"n1": Skip, "n2": Pass},
			reasonParts: map[string]string{"n1": "cache room is unknown"},
		},
		{
			name:  "unknown size skips the disk check",
			note:  fetchesIt,
			model: catalog.Model{Name: "llama", Source: remote},
			nodes: []*Node{mk("n1", "a", free(0))},
			want:  "n1:unchecked", choice: "n1",
			disk:        map[string]Result{"n1": Skip},
			reasonParts: map[string]string{"n1": "size of llama is unknown"},
		},
		{
			name:  "a path source is never fetched: no disk check, no refusal",
			model: catalog.Model{Name: "llama", Source: "/lustre/llama", Size: 8 * GB},
			nodes: []*Node{mk("n1", "a", free(0)), mk("n2", "a", shared("llama"))},
			want:  "n2:holds-shared n1:unchecked", holder: "n2", choice: "n2",
			disk:        map[string]Result{"n1": Skip},
			reasonParts: map[string]string{"n1": "path source is never fetched"},
		},
		{
			name:  "a model id is the engine's",
			model: catalog.Model{Name: "qwen", Source: "Qwen/Qwen2.5-7B"},
			nodes: []*Node{mk("n1", "a")},
			want:  "n1:unchecked", choice: "n1",
			note:        "no usable node holds qwen, and the engine resolves a model id itself",
			reasonParts: map[string]string{"n1": "engine resolves a model id"},
		},
		{
			name:  "a fetch in progress ranks after holders, before room; needs only the rest",
			model: llama,
			nodes: []*Node{mk("n1", "a"), mk("n2", "a", free(5*GB), fetching(4*GB, 8*GB, time.Second)), mk("n3", "a", local("llama"))},
			want:  "n3:holds-local n2:fetching n1:has-room", holder: "n3", choice: "n3",
			disk:        map[string]Result{"n2": Pass},
			reasonParts: map[string]string{"n2": "fetching it now (50%)"},
		},
		{
			name:  "a stalled fetch earns nothing",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n1", "a"), mk("n2", "a", fetching(4*GB, 8*GB, 5*time.Minute))},
			want:  "n1:has-room n2:has-room", choice: "n1",
			reasonParts: map[string]string{"n2": "stalled"},
		},
		{
			name:  "an incomplete copy is no copy",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n1", "a", incomplete("llama"))},
			want:  "n1:has-room", choice: "n1",
			reasonParts: map[string]string{"n1": "missing part 2 of 2"},
		},
		{
			name:   "stale holders do not count, and rank after every fresh node",
			model:  llama,
			nodes:  []*Node{mk("n1", "a", local("llama"), staleNode()), mk("n2", "a", free(0))},
			want:   "n2:no-room n1:stale",
			noRoom: "n2",
			disk:   map[string]Result{"n1": Skip},
			note:   "no usable node; Slurm decides",
		},
		{
			name:  "drained and down holders keep nothing in placement",
			model: llama,
			nodes: []*Node{mk("n1", "a", local("llama"), slurmState("drained")), mk("n2", "a", local("llama"), slurmState("down*")),
				mk("n3", "a", slurmState("idle")), mk("n4", "a", local("llama"), slurmState("mixed"))},
			want:   "n4:holds-local n3:has-room n1:not-schedulable n2:not-schedulable",
			holder: "n4", choice: "n4",
			reasonParts: map[string]string{"n1": "Slurm has it drained"},
		},
		{
			name:  "memory: too little ranks last even when holding; unknown is skipped and never excludes",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n1", "a", local("llama"), gpu(16*GB)), mk("n2", "a", gpu(80*GB)), mk("n3", "a")},
			want:  "n2:has-room n3:has-room n1:gpu-memory", holder: "n1", choice: "n2",
			mem:         map[string]Result{"n1": Fail, "n2": Pass, "n3": Skip},
			reasonParts: map[string]string{"n1": "needs 20 GB of GPU memory but has only 16 GB"},
		},
		{
			name:  "memory not given in the catalog: skipped everywhere",
			note:  fetchesIt,
			model: catalog.Model{Name: "llama", Source: remote, Size: 8 * GB},
			nodes: []*Node{mk("n1", "a", gpu(1))},
			want:  "n1:has-room", choice: "n1",
			mem: map[string]Result{"n1": Skip},
		},
		{
			name:  "a node no agent reported from is a candidate whose room is unknown",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n9", "", unreported()), mk("n1", "a", free(0))},
			want:  "n9:unchecked n1:no-room", noRoom: "n1", choice: "n9",
			disk:        map[string]Result{"n9": Skip},
			reasonParts: map[string]string{"n9": "no agent has reported"},
		},
		{
			name:  "natural name order within a tier",
			note:  fetchesIt,
			model: llama,
			nodes: []*Node{mk("n10", "a"), mk("n9", "a"), mk("m1", "a")},
			want:  "m1:has-room n9:has-room n10:has-room", choice: "m1",
		},
		{
			name:  "no candidates",
			model: llama,
			want:  "",
			note:  "no candidate nodes",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Rank(req(tt.model, 1), tt.nodes)
			var got, holders, noRoom []string
			for _, n := range r.Nodes {
				got = append(got, n.Node+":"+n.Tier.String())
				if n.Holder {
					holders = append(holders, n.Node)
				}
				if n.NoRoom() {
					noRoom = append(noRoom, n.Node)
				}
				if n.Reason == "" || n.Memory.Reason == "" || n.Disk.Reason == "" {
					t.Errorf("%s has no reason: %+v", n.Node, n)
				}
				if want, ok := tt.mem[n.Node]; ok && n.Memory.Result != want {
					t.Errorf("%s memory = %s (%s), want %s", n.Node, n.Memory.Result, n.Memory.Reason, want)
				}
				if want, ok := tt.disk[n.Node]; ok && n.Disk.Result != want {
					t.Errorf("%s disk = %s (%s), want %s", n.Node, n.Disk.Result, n.Disk.Reason, want)
				}
				if want, ok := tt.reasonParts[n.Node]; ok && !strings.Contains(n.Reason+" | "+n.Disk.Reason+" | "+n.Memory.Reason, want) {
					t.Errorf("%s reasons %q / %q / %q lack %q", n.Node, n.Reason, n.Disk.Reason, n.Memory.Reason, want)
				}
			}
			check := func(what string, got []string, want string) {
				t.Helper()
				if g := strings.Join(got, " "); g != want {
					t.Errorf("%s = %q, want %q", what, g, want)
				}
			}
			check("ranking", got, tt.want)
			check("holders", holders, tt.holder)
			check("no room", noRoom, tt.noRoom)
			check("choice", r.Choice, tt.choice)
			if !strings.HasPrefix(r.Note, tt.note) || (tt.note == "" && r.Note != "") {
				t.Errorf("note = %q, want %q", r.Note, tt.note)
			}
		})
	}
}

func TestRankMultiNode(t *testing.T) {
	tests := []struct {
		name    string
		count   int
		nodes   []*Node
		fabrics string // fabric order
		want    string // node order
		choice  string
		note    string
	}{
		{
			name:  "the fabric that holds it goes first even when smaller",
			count: 2,
			nodes: []*Node{mk("n1", "ib-a"), mk("n2", "ib-a"), mk("n3", "ib-a"),
				mk("n4", "ib-b", local("llama")), mk("n5", "ib-b")},
			fabrics: "ib-b ib-a",
			want:    "n4 n5 n1 n2 n3",
			choice:  "n4 n5",
		},
		{
			name:  "a fabric too small to host the job goes after one that can, holders or not",
			count: 3,
			nodes: []*Node{mk("n1", "ib-a"), mk("n2", "ib-a"), mk("n3", "ib-a"),
				mk("n4", "ib-b", local("llama")), mk("n5", "ib-b", local("llama"))},
			fabrics: "ib-a ib-b",
			want:    "n1 n2 n3 n4 n5",
			choice:  "n1 n2 n3",
		},
		{
			name:  "holders count up to the job's size, then local copies decide",
			count: 2,
			nodes: []*Node{mk("a1", "ib-a", shared("llama")), mk("a2", "ib-a", shared("llama")), mk("a3", "ib-a", shared("llama")),
				mk("b1", "ib-b", local("llama")), mk("b2", "ib-b", local("llama"))},
			fabrics: "ib-b ib-a",
			want:    "b1 b2 a1 a2 a3",
			choice:  "b1 b2",
		},
		{
			name:  "nodes without room do not make a fabric big enough",
			count: 2,
			nodes: []*Node{mk("n1", "ib-a", local("llama")), mk("n2", "ib-a", free(0)),
				mk("n3", "ib-b"), mk("n4", "ib-b")},
			fabrics: "ib-b ib-a",
			want:    "n3 n4 n1 n2",
			choice:  "n3 n4",
		},
		{
			name:  "no fabric big enough: still an answer, no choice",
			count: 3,
			nodes: []*Node{mk("n1", "ib-a", local("llama")), mk("n2", "ib-a"),
				mk("n3", "ib-b"), mk("n4", "ib-b")},
			fabrics: "ib-a ib-b",
			want:    "n1 n2 n3 n4",
			note:    "no fabric has 3 usable nodes",
		},
		{
			name:    "nodes that never reported form the unknown fabric, tried last",
			count:   2,
			nodes:   []*Node{mk("x1", "", unreported()), mk("x2", "", unreported()), mk("n1", "ib-a"), mk("n2", "ib-a")},
			fabrics: "ib-a ",
			want:    "n1 n2 x1 x2",
			choice:  "n1 n2",
		},
		{
			name:    "tie: fabric name",
			count:   2,
			nodes:   []*Node{mk("n3", "ib-b"), mk("n4", "ib-b"), mk("n1", "ib-a"), mk("n2", "ib-a")},
			fabrics: "ib-a ib-b",
			want:    "n1 n2 n3 n4",
			choice:  "n1 n2",
		},
		{
			name:  "a drained holder does not make its fabric the one that serves",
			count: 2,
			nodes: []*Node{mk("n1", "ib-a", local("llama"), slurmState("drained")), mk("n2", "ib-a"), mk("n5", "ib-a"),
				mk("n3", "ib-b"), mk("n4", "ib-b", local("llama"))},
			fabrics: "ib-b ib-a",
			want:    "n4 n3 n2 n5 n1",
			choice:  "n4 n3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Rank(req(llama, tt.count), tt.nodes)
			var fabrics, nodes []string
			for _, f := range r.Fabrics {
				fabrics = append(fabrics, f.Fabric)
				if f.Reason == "" {
					t.Errorf("fabric %s has no reason", f.Fabric)
				}
			}
			for _, n := range r.Nodes {
				nodes = append(nodes, n.Node)
			}
			if g := strings.Join(fabrics, " "); g != tt.fabrics {
				t.Errorf("fabrics = %q, want %q", g, tt.fabrics)
			}
			if g := strings.Join(nodes, " "); g != tt.want {
				t.Errorf("nodes = %q, want %q", g, tt.want)
			}
			if g := strings.Join(r.Choice, " "); g != tt.choice {
				t.Errorf("choice = %q, want %q", g, tt.choice)
			}
			if !strings.Contains(r.Note, tt.note) {
				t.Errorf("note = %q, want %q", r.Note, tt.note)
			}
			// The choice is always inside one fabric.
			fab := map[string]string{}
			for _, n := range r.Nodes {
				fab[n.Node] = n.Fabric
			}
			for _, c := range r.Choice {
				if fab[c] != fab[r.Choice[0]] {
					t.Errorf("choice %v spans fabrics", r.Choice)
				}
			}
		})
	}
}

// TestRankLookedIsIgnored: for any node, flipping Looked changes nothing in
// its ranking.
func TestRankLookedIsIgnored(t *testing.T) {
	opts := []nodeOpt{local("llama"), shared("llama"), free(0), noCacheInfo(), gpu(8 * GB), staleNode(), slurmState("drained"), fetching(1, 8*GB, 0)}
	for mask := range 1 << len(opts) {
		var chosen []nodeOpt
		for i, o := range opts {
			if mask&(1<<i) != 0 {
				chosen = append(chosen, o)
			}
		}
		a := Rank(req(llama, 1), []*Node{mk("n1", "a", chosen...)}).Nodes[0]
		b := Rank(req(llama, 1), []*Node{mk("n1", "a", append(slices.Clone(chosen), neverLooked())...)}).Nodes[0]
		if !reflect.DeepEqual(a, b) {
			t.Errorf("mask %b: looked %+v, never looked %+v", mask, a, b)
		}
	}
}

func TestSchedulable(t *testing.T) {
	for state, want := range map[string]bool{
		"": true, "idle": true, "mixed": true, "allocated": true, "completing": true, "IDLE": true, "idle~": true,
		"drained": false, "draining": false, "drain": false, "down": false, "down*": false, "idle*": false,
		"fail": false, "failing": false, "future": false, "inval": false, "reserved": true, "planned": true,
		"mixed-": true, "allocated+": true, "maint": true,
		"unknown": false, "unknown*": false, "reboot": false, "reboot^": false,
	} {
		if got := Schedulable(state); got != want {
			t.Errorf("Schedulable(%q) = %v, want %v", state, got, want)
		}
	}
}

// TestRankInvariants ranks random clusters and checks what must hold of
// every answer: each candidate once, tiers in order (within each fabric
// when the job spans nodes), a choice of exactly Count usable nodes in one
// fabric whenever some fabric has enough, and a holder or a node without
// room only where the node's facts say so.
func TestRankInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	opts := []nodeOpt{local("llama"), shared("llama"), incomplete("llama"), free(0), free(100 * GB), noCacheInfo(),
		gpu(8 * GB), gpu(80 * GB), staleNode(), slurmState("drained"), slurmState("idle"), neverLooked(), fetching(GB, 8*GB, 0), unreported()}
	models := []catalog.Model{llama, {Name: "llama", Source: remote}, {Name: "llama", Source: "/lustre/llama"}}
	for round := range 2000 {
		var nodes []*Node
		for i := range rng.IntN(12) {
			var chosen []nodeOpt
			for _, o := range opts {
				if rng.IntN(5) == 0 {
					chosen = append(chosen, o)
				}
			}
			nodes = append(nodes, mk(fmt.Sprintf("n%d", i), fmt.Sprintf("ib-%d", rng.IntN(3)), chosen...))
		}
		count := 1 + rng.IntN(4)
		r := Rank(req(models[rng.IntN(len(models))], count), nodes)
		if len(r.Nodes) != len(nodes) {
			t.Fatalf("round %d: %d ranked of %d", round, len(r.Nodes), len(nodes))
		}
		seen := map[string]bool{}
		byName := map[string]Ranked{}
		for i, n := range r.Nodes {
			if seen[n.Node] {
				t.Fatalf("round %d: %s twice", round, n.Node)
			}
			seen[n.Node], byName[n.Node] = true, n
			if i > 0 {
				prev := r.Nodes[i-1]
				if (count == 1 || prev.Fabric == n.Fabric) && prev.Tier > n.Tier {
					t.Errorf("round %d: %s (%s) ranked before %s (%s)", round, prev.Node, prev.Tier, n.Node, n.Tier)
				}
			}
			if n.Holder && (n.Holds == HoldNone || n.Tier == TierStale || n.Tier == TierUnschedulable) {
				t.Errorf("round %d: %+v is no holder", round, n)
			}
			if n.NoRoom() && n.Holder {
				t.Errorf("round %d: %+v holds it yet has no room", round, n)
			}
		}
		enough := false
		for _, f := range r.Fabrics {
			enough = enough || f.Enough
		}
		if enough != (r.Choice != nil) || r.Choice != nil && len(r.Choice) != count {
			t.Errorf("round %d: count %d, choice %v, fabrics %+v", round, count, r.Choice, r.Fabrics)
		}
		for _, c := range r.Choice {
			if !byName[c].Tier.Usable() || count > 1 && byName[c].Fabric != byName[r.Choice[0]].Fabric {
				t.Errorf("round %d: choice %v includes %+v", round, r.Choice, byName[c])
			}
		}
	}
}
