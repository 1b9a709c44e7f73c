package coordinator

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// TestValidReportDuplicates: a path listed twice is refused however the
// list is ordered and however each copy is spelled, and distinct paths in
// any order are not. validReport compares neighbours while the list is in
// path order (as agents send it) and switches to a set at the first path
// out of order: both ways must find what the other would.
func TestValidReportDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paths []string
		dup   string // the path named as listed twice, "" for none
	}{
		{"in order", []string{"/m/a", "/m/b", "/m/c"}, ""},
		{"out of order", []string{"/m/c", "/m/a", "/m/b"}, ""},
		{"out of order late", []string{"/m/a", "/m/b", "/m/d", "/m/c"}, ""},
		{"neighbours", []string{"/m/a", "/m/b", "/m/b", "/m/c"}, "/m/b"},
		{"neighbours spelled apart", []string{"/m/a/", "/m/a"}, "/m/a"},
		{"apart, in order up to the copy", []string{"/m/a", "/m/b", "/m/a"}, "/m/a"},
		{"apart, spelled apart", []string{"/m/a", "/m/b", "/m/./a"}, "/m/a"},
		{"after the order broke", []string{"/m/b", "/m/a", "/m/c", "/m/b"}, "/m/b"},
		{"unclean sorting first", []string{"/m//z", "/m/a", "/m/z"}, "/m/z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &api.Report{Node: "n1", Fabric: "ib-a"}
			for _, p := range tc.paths {
				r.Weights = append(r.Weights, api.Weight{Path: p})
			}
			err := validReport(r)
			switch {
			case tc.dup == "" && err != nil:
				t.Errorf("validReport(%q) = %v, want nil", tc.paths, err)
			case tc.dup != "" && (err == nil || !strings.Contains(err.Error(), `"`+tc.dup+`" twice`)):
				t.Errorf("validReport(%q) = %v, want %q named as listed twice", tc.paths, err, tc.dup)
			}
		})
	}
}

// BenchmarkValidReport is the check of one node's report of 50 weights
// (BenchmarkCoordinator's), which every report pays before it is queued.
func BenchmarkValidReport(b *testing.B) {
	r := benchReport()
	ws := r.Weights
	for b.Loop() {
		r.Weights = ws
		if err := validReport(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAppendAnswer: the answer written without encoding/json is byte for
// byte what json.Encoder writes, and a member it does not write would
// show: appendAnswer knows every member of ReportAnswer but those
// writeAnswer leaves to writeJSON.
func TestAppendAnswer(t *testing.T) {
	for _, ans := range []ReportAnswer{
		{Result: "stored"},
		{Result: "dropped", CatalogTag: "c1-42"},
		{Result: "stored", CatalogTag: "<&>\"\\\u2028é\xff"},
	} {
		var want bytes.Buffer
		json.NewEncoder(&want).Encode(ans)
		if got := appendAnswer(nil, &ans); string(got) != want.String() {
			t.Errorf("appendAnswer(%+v) = %s; json.Encoder writes %s", ans, got, want.Bytes())
		}
	}
	var names []string
	ty := reflect.TypeFor[ReportAnswer]()
	for i := range ty.NumField() {
		names = append(names, ty.Field(i).Name)
	}
	if want := []string{"Result", "GC", "Seed", "CatalogTag", "Prefetch"}; !slices.Equal(names, want) {
		t.Errorf("ReportAnswer's members are %q, not %q: writeAnswer must send the new ones to writeJSON or write them", names, want)
	}
}
