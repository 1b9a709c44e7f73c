package table

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestWritePlacement(t *testing.T) {
	p := &api.Placement{
		Model: api.Model{Name: "llama", Source: "hf:o/r/l.gguf", GPUMemory: 20e9}, Count: 2, FetchBytes: 8e9,
		Fabrics: []api.PlacementFabric{{Fabric: "ib-a", Usable: 2, Enough: true, Reason: "0 nodes can serve llama"}, {Fabric: "", Usable: 1, Reason: "r"}},
		Nodes: []api.PlacementNode{
			{Rank: 1, Node: "n1", Fabric: "ib-a", Tier: api.TierHasRoom, Holds: api.HoldNone, Reason: "does not hold it; its cache has room to fetch it",
				Memory: api.PlacementCheck{Result: api.CheckPass, NeedBytes: 20e9, HaveBytes: 80e9},
				Disk:   api.PlacementCheck{Result: api.CheckPass, NeedBytes: 8e9, HaveBytes: 50e9}},
			{Rank: 2, Node: "n2", Fabric: "ib-a", Tier: api.TierGPUMemory, Holds: api.HoldLocal, Reason: "needs 20 GB of GPU memory but has only 16 GB",
				Memory: api.PlacementCheck{Result: api.CheckFail, NeedBytes: 20e9, HaveBytes: 16e9},
				Disk:   api.PlacementCheck{Result: api.CheckSkip, Reason: "disk not checked: it holds the weights"}},
			{Rank: 3, Node: "x9", Fabric: "", Tier: api.TierUnchecked, Holds: api.HoldNone, Reason: "no agent has reported",
				Memory: api.PlacementCheck{Result: api.CheckSkip, Reason: "memory not checked: unknown"},
				Disk:   api.PlacementCheck{Result: api.CheckSkip, Reason: "disk not checked: its cache room is unknown"}},
		},
		Choice: []string{"n1", "n2"}, Note: "no usable node holds llama; a job fetches it",
	}
	var b bytes.Buffer
	if err := WritePlacement(&b, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"MODEL llama source hf:o/r/l.gguf nodes wanted 2 a fetch is 8.0 GB gpu memory 20 GB",
		"ib-a 0 0 2 yes 0 nodes can serve llama",
		"(unknown) 0 0 1 no r",
		"1 n1 ib-a has-room none ok 80 GB ok 50 GB free does not hold it",
		"2 n2 ib-a gpu-memory local FAIL 16 GB < 20 GB skip needs 20 GB",
		"3 x9 (unknown) unchecked none skip skip no agent has reported",
		"USE: n1,n2", "NOTE: no usable node holds llama",
		"SKIPPED: disk not checked: it holds the weights", "SKIPPED: memory not checked: unknown",
		"SKIPPED: disk not checked: its cache room is unknown",
	} {
		if !strings.Contains(squeeze(b.String()), squeeze(want)) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}

	b.Reset()
	if err := WritePlacement(&b, &api.Placement{Model: api.Model{Name: "m", Source: "/m"}, Count: 1, Note: "no candidate nodes"}); err != nil {
		t.Fatal(err)
	}
	if s := b.String(); !strings.Contains(s, "(no candidate nodes)") || strings.Contains(s, "HOLDERS") || strings.Contains(s, "USE:") {
		t.Errorf("no nodes:\n%s", s)
	}
}

// A model of several files shows its first source and how many more.
func TestWriteModelsSets(t *testing.T) {
	f := func(src string) catalog.File { return catalog.File{Source: src} }
	var b bytes.Buffer
	err := WriteModels(&b, []api.Model{
		{Name: "two", Source: "https://o/q-1.gguf", Files: []catalog.File{f("https://o/q-1.gguf"), f("https://o/q-2.gguf")}},
		{Name: "three", Source: "https://o/r-1.gguf", Files: []catalog.File{f("https://o/r-1.gguf"), f("https://o/r-2.gguf"), f("https://o/r-3.gguf")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := squeeze(b.String())
	for _, want := range []string{"two https://o/q-1.gguf (+1 file) ", "three https://o/r-1.gguf (+2 files) "} {
		if !strings.Contains(got, want) {
			t.Errorf("models table %q; want %q", got, want)
		}
	}
}
