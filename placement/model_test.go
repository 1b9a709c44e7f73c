package placement

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestNodeState(t *testing.T) {
	for _, tt := range []struct {
		age    time.Duration
		looked bool
		want   State
	}{
		{0, true, StateOK},
		{staleAfter, true, StateOK},
		{staleAfter + time.Nanosecond, true, StateStale},
		{0, false, StateNeverLooked},
		{staleAfter + time.Second, false, StateStale}, // staleness wins
	} {
		n := &Node{Received: now.Add(-tt.age), Looked: tt.looked}
		if got := n.State(now, staleAfter); got != tt.want {
			t.Errorf("age %s looked %v: %s, want %s", tt.age, tt.looked, got, tt.want)
		}
	}
	if StaleAfter(30*time.Second) != 90*time.Second {
		t.Errorf("StaleAfter(30s) = %s, want three intervals", StaleAfter(30*time.Second))
	}
}

func TestHoldingAndFeatures(t *testing.T) {
	tests := []struct {
		name     string
		node     *Node
		model    string
		hold     Hold
		path     string
		incomp   string
		features string
	}{
		{"local", mk("n1", "a", local("llama")), "llama", HoldLocal, "/var/cache/llmgw/llama", "", "llmgw.llama"},
		{"shared", mk("n1", "a", shared("llama")), "llama", HoldShared, "/lustre/llama", "", "llmgw.llama"},
		{"local wins the path over shared", mk("n1", "a", shared("llama"), local("llama")), "llama", HoldLocal, "/var/cache/llmgw/llama", "", "llmgw.llama"},
		{"incomplete", mk("n1", "a", incomplete("llama")), "llama", HoldNone, "", "/var/cache/llmgw/llama: missing part 2 of 2", ""},
		{"incomplete beside complete", mk("n1", "a", incomplete("llama"), shared("llama")), "llama", HoldShared, "/lustre/llama", "", "llmgw.llama"},
		{"other models, sorted, once", mk("n1", "a", local("qwen"), shared("llama"), local("llama")), "mistral", HoldNone, "", "", "llmgw.llama llmgw.qwen"},
		{"stale: no features", mk("n1", "a", local("llama"), staleNode()), "llama", HoldLocal, "/var/cache/llmgw/llama", "", ""},
		{"drained keeps its features", mk("n1", "a", local("llama"), slurmState("drained")), "llama", HoldLocal, "/var/cache/llmgw/llama", "", "llmgw.llama"},
		{"never looked serves its cache", mk("n1", "a", local("llama"), neverLooked()), "llama", HoldLocal, "/var/cache/llmgw/llama", "", "llmgw.llama"},
		{"nothing", mk("n1", "a"), "llama", HoldNone, "", "", ""},
	}
	for _, tt := range tests {
		h := tt.node.Holding(tt.model)
		if h.Hold != tt.hold || h.Path != tt.path || h.Incomplete != tt.incomp {
			t.Errorf("%s: Holding = %+v, want %s at %q incomplete %q", tt.name, h, tt.hold, tt.path, tt.incomp)
		}
		if got := strings.Join(Features(tt.node, now, staleAfter), " "); got != tt.features {
			t.Errorf("%s: Features = %q, want %q", tt.name, got, tt.features)
		}
		for _, f := range Features(tt.node, now, staleAfter) {
			if !strings.HasPrefix(f, FeaturePrefix) || catalog.ValidModelName(strings.TrimPrefix(f, FeaturePrefix)) != nil {
				t.Errorf("%s: feature %q", tt.name, f)
			}
		}
	}
}

func TestFetchProgress(t *testing.T) {
	n := &Node{Received: now.Add(-5 * time.Second), ReportTime: now.Add(-5 * time.Second)}
	for _, tt := range []struct {
		name    string
		f       Fetch
		since   time.Duration
		stalled bool
		pct     float64
		eta     time.Duration
	}{
		{"going", Fetch{Done: 40, Total: 100, Rate: 10, Progressed: n.ReportTime.Add(-time.Second)}, 6 * time.Second, false, 40, 6 * time.Second},
		{"no total", Fetch{Done: 40, Total: -1, Rate: 10, Progressed: n.ReportTime}, 5 * time.Second, false, -1, -1},
		{"no rate", Fetch{Done: 40, Total: 100, Progressed: n.ReportTime}, 5 * time.Second, false, 40, -1},
		{"stalled", Fetch{Done: 40, Total: 100, Rate: 10, Progressed: n.ReportTime.Add(-2 * time.Minute)}, 2*time.Minute + 5*time.Second, true, 40, -1},
		{"no progress yet: since the start", Fetch{Total: 100, Started: n.ReportTime.Add(-10 * time.Second)}, 15 * time.Second, false, 0, -1},
		// A clock that is off: the agent's progress time is after its own
		// report time, so only the coordinator's clock counts.
		{"agent clock ahead", Fetch{Done: 1, Total: 2, Rate: 1, Progressed: now.Add(time.Hour)}, 5 * time.Second, false, 50, time.Second},
	} {
		p := FetchProgress(n, tt.f, now, stallAfter)
		if p.Since != tt.since || p.Stalled != tt.stalled || p.Percent != tt.pct || p.ETA != tt.eta {
			t.Errorf("%s: %+v, want since %s stalled %v %v%% eta %s", tt.name, p, tt.since, tt.stalled, tt.pct, tt.eta)
		}
	}
}

func TestFold(t *testing.T) {
	cat := NewCatalog([]catalog.Model{
		{Name: "qwen", Source: remote},
		{Name: "llama", Source: "/lustre/llama", Size: 141 * GB},
		{Name: "mistral", Source: "/scratch/mistral"},
	})
	if got := []string{cat.Models[0].Name, cat.Models[1].Name, cat.Models[2].Name}; !slices.Equal(got, []string{"llama", "mistral", "qwen"}) {
		t.Fatalf("catalog order %v", got)
	}
	nodes := []*Node{
		mk("n1", "ib-a", shared("llama")),
		mk("n2", "ib-a", shared("llama"), local("llama"), local("qwen")),
		mk("n3", "ib-a", local("qwen"), staleNode()),
		mk("n4", "ib-b", incomplete("qwen"), neverLooked()),
		mk("n5", "ib-b", fetching(1, 2, 0)),
		mk("n6", "ib-b", local("unknown-model")),
	}
	f := FoldNodes(cat, slices.Values(nodes), now, staleAfter)
	if f.Counts != (Counts{Total: 6, OK: 4, Stale: 1, NeverLooked: 1}) {
		t.Errorf("counts %+v", f.Counts)
	}
	if got := f.FabricNames(); !slices.Equal(got, []string{"ib-a", "ib-b"}) {
		t.Errorf("fabrics %v", got)
	}
	if a := f.Fabrics["ib-a"]; !slices.Equal(a.Stale, []string{"n3"}) || a.Counts.Total != 3 {
		t.Errorf("ib-a %+v", a)
	}
	if b := f.Fabrics["ib-b"]; !slices.Equal(b.NeverLooked, []string{"n4"}) {
		t.Errorf("ib-b %+v", b)
	}
	llama, _ := cat.Index("llama")
	qwen, _ := cat.Index("qwen")
	mistral, _ := cat.Index("mistral")
	type row struct {
		serve         Hold
		shared, local string
		fetchBytes    int64
		fetchable     bool
		fetching      int
	}
	got := map[string]row{}
	for _, mi := range []int{llama, qwen, mistral} {
		for _, fab := range []string{"ib-a", "ib-b", "nowhere"} {
			p := f.Presence(mi, fab)
			got[cat.Models[mi].Name+"/"+fab] = row{p.Serve, strings.Join(p.Shared, ","), strings.Join(p.Local, ","), p.FetchBytes, p.Fetchable, len(p.Fetching)}
		}
	}
	want := map[string]row{
		"llama/ib-a":      {HoldShared, "n1,n2", "n2", 0, false, 0},
		"llama/ib-b":      {HoldNone, "", "", 141 * GB, false, 0},
		"llama/nowhere":   {HoldNone, "", "", 141 * GB, false, 0},
		"qwen/ib-a":       {HoldLocal, "", "n2", 0, false, 0},  // n3 is stale
		"qwen/ib-b":       {HoldNone, "", "", 8 * GB, true, 1}, // no catalog size: the largest copy seen
		"qwen/nowhere":    {HoldNone, "", "", 8 * GB, true, 0},
		"mistral/ib-a":    {HoldNone, "", "", -1, false, 0},
		"mistral/ib-b":    {HoldNone, "", "", -1, false, 0},
		"mistral/nowhere": {HoldNone, "", "", -1, false, 0},
	}
	if !maps.Equal(got, want) {
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("%s = %+v, want %+v", k, got[k], want[k])
			}
		}
	}
}
