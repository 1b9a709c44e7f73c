package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/llmgw/llmgw/slurm"
)

// TestSlurmNodesReadsAddresses: Slurm's node list, as sinfo --json printed
// it on the dev cluster, gives each node's NodeAddr and NodeHostname.
func TestSlurmNodesReadsAddresses(t *testing.T) {
	data, err := filepath.Abs(filepath.Join("..", "slurm", "testdata", "22.05", "sinfo-json-features.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sinfo"), []byte("#!/bin/sh\nexec cat '"+data+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := SlurmNodes{Run: &slurm.Runner{Dir: dir}}.KnownNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []KnownNode
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		want = append(want, KnownNode{Name: n, Addrs: []string{"127.0.0.1", "localhost"}})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("KnownNodes = %+v, want %+v", got, want)
	}
}
