package slurm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseNodesJSONScale parses what sinfo -N --json prints for
// 10,000 nodes that each offer 200 models of 64-character names (every
// node's AvailableFeatures is llmgw's superset) and hold a few: what the
// reconciler reads every interval at issue 26's scale.
func BenchmarkParseNodesJSONScale(b *testing.B) {
	var super []string
	for m := range 200 {
		super = append(super, fmt.Sprintf("llmgw.m%03d-%s", m, strings.Repeat("x", 59)))
	}
	avail := "ib-a," + strings.Join(super, ",")
	type node struct {
		Name           string   `json:"name"`
		Features       string   `json:"features"`
		ActiveFeatures string   `json:"active_features"`
		State          string   `json:"state"`
		StateFlags     []string `json:"state_flags"`
		Partitions     []string `json:"partitions"`
	}
	doc := struct {
		Meta  map[string]any `json:"meta"`
		Nodes []node         `json:"nodes"`
	}{Meta: map[string]any{"Slurm": map[string]string{"release": "22.05.8"}}}
	for i := range 10000 {
		doc.Nodes = append(doc.Nodes, node{Name: fmt.Sprintf("x%05d", i), Features: avail,
			ActiveFeatures: "ib-a," + super[i%200] + "," + super[(i*7)%200], State: "idle", Partitions: []string{"extra"}})
	}
	data, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		nodes, err := ParseNodesJSON(data)
		if err != nil || len(nodes) != 10000 || len(nodes[9999].Available) != 201 {
			b.Fatalf("%d nodes, %v", len(nodes), err)
		}
	}
}
