package coordinator

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// FuzzWeightsLite holds weightsLite to encoding/json: whatever it takes,
// unmarshalStrict takes too, to the same weights (an empty list included:
// [] is an empty slice, not nil). What it declines is left to
// unmarshalStrict, so declining is always safe; taking something
// encoding/json would read otherwise, or refuse, is the bug.
func FuzzWeightsLite(f *testing.F) {
	agents, _ := json.Marshal(benchReport().Weights)
	for _, s := range []string{
		string(agents),
		`[]`, `null`, `[null]`, `[{}]`, `{}`, `[{"path":"/a"}] `, `[{"path":"/a"}] x`, `[{"path":"/a"},]`,
		`[{"path":"/a","size_bytes":1,"shared":true,"complete":false,"problem":"p","model_id":"o/r","revision":"main"}]`,
		`[{"path":"/a","path":"/b"}]`, `[{"PATH":"/a"}]`, `[{"Path":"/a"}]`, `[{"pat\u0068":"/a"}]`, `[{"path":"/a","x":1}]`,
		`[{"path":null,"size_bytes":null,"shared":null}]`, `[{"size_bytes":1.0}]`, `[{"size_bytes":1e3}]`, `[{"size_bytes":-0}]`,
		`[{"size_bytes":9223372036854775808}]`, `[{"size_bytes":"1"}]`, `[{"shared":1}]`, `[{"path":"\u00e9\ud83d\ude00"}]`,
		`[{"path":"\ud800"}]`, "[{\"path\":\"\xff\"}]", `[{"path":"a\"b"}]`, `[{"path":1}]`, ` [ { "path" : "/a" } ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := weightsLite(raw)
		if !ok {
			return
		}
		var want []api.Weight
		if err := unmarshalStrict(raw, &want); err != nil {
			t.Fatalf("weightsLite took %q, which encoding/json refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("weightsLite(%q) = %#v; encoding/json gives %#v", raw, got, want)
		}
	})
}

// TestWeightsLiteTakesAgentsReports: an agent's weights, as it writes
// them, go the fast way; a form only encoding/json takes goes the slow way
// and still decodes. Without this, a weightsLite that declined everything
// would pass the fuzz test and cost the ingest its gain.
func TestWeightsLiteTakesAgentsReports(t *testing.T) {
	ws := benchReport().Weights
	ws[0].Problem, ws[1].ModelID, ws[1].Revision = "short read", "org/repo", "0123abc"
	raw, _ := json.Marshal(ws)
	got, ok := weightsLite(raw)
	if !ok || !reflect.DeepEqual(got, ws) {
		t.Fatalf("weightsLite of an agent's %d weights: %v, %d weights", len(ws), ok, len(got))
	}
	folded := []byte(strings.Replace(string(raw), `"path"`, `"Path"`, 1))
	if _, ok := weightsLite(folded); ok {
		t.Fatalf("weightsLite took a member name in another case; that is encoding/json's to judge")
	}
	var r api.Report
	if err := decodeWeights(folded, &r); err != nil || !reflect.DeepEqual(r.Weights, ws) {
		t.Fatalf("decodeWeights of the same weights with a name in another case: %v", err)
	}
	r = api.Report{Node: "n1"}
	err := decodeWeights([]byte(`[{"path":"/a","size":1}]`), &r)
	if err == nil || !strings.Contains(err.Error(), "weights are not the JSON expected") {
		t.Fatalf("decodeWeights of an unknown member: %v, want it refused", err)
	}
}

// TestWeightsLiteKnowsEveryField fails when api.Weight gains a member that
// weightsLite does not read: it would decline every report that has it
// (safe, but the ingest would quietly lose its fast path).
func TestWeightsLiteKnowsEveryField(t *testing.T) {
	var names []string
	ty := reflect.TypeFor[api.Weight]()
	for i := range ty.NumField() {
		names = append(names, strings.Split(ty.Field(i).Tag.Get("json"), ",")[0])
	}
	if !slices.Equal(names, weightFields) {
		t.Fatalf("api.Weight's members are %q; weightsLite reads %q", names, weightFields)
	}
}

// BenchmarkDecodeWeights is decoding one node's 50 weights (the
// benchmark's), the way a first report pays it: weightsLite, and
// encoding/json for comparison.
func BenchmarkDecodeWeights(b *testing.B) {
	raw, _ := json.Marshal(benchReport().Weights)
	b.Run("lite", func(b *testing.B) {
		for b.Loop() {
			if _, ok := weightsLite(raw); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var ws []api.Weight
			if err := unmarshalStrict(raw, &ws); err != nil {
				b.Fatal(err)
			}
		}
	})
}
