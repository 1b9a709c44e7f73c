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

// TestSlurmNodesAddressesFromScontrol: from 23.02 sinfo -N --json leaves
// NodeAddr and NodeHostname out (the 24.11 and 26.05 listings of the dev
// cluster); scontrol show nodes --json says them, so a node is still known
// by the address its munged speaks from, not only by a name that may not
// resolve (n1..n4 do not).
func TestSlurmNodesAddressesFromScontrol(t *testing.T) {
	for _, rel := range []string{"24.11", "26.05"} {
		t.Run(rel, func(t *testing.T) {
			fixture := func(name string) string {
				p, err := filepath.Abs(filepath.Join("..", "slurm", "testdata", rel, "fresh", name))
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			dir := t.TempDir()
			for cmd, args := range map[string][2]string{
				"sinfo":    {"-N --json", fixture("sinfo-N-json.json")},
				"scontrol": {"show nodes --json", fixture("scontrol-show-nodes-json.json")},
			} {
				script := "#!/bin/sh\ncase \"$*\" in\n\"" + args[0] + "\") exec cat '" + args[1] + "' ;;\n*) echo \"unexpected: $*\" >&2; exit 1 ;;\nesac\n"
				if err := os.WriteFile(filepath.Join(dir, cmd), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
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
		})
	}
}
