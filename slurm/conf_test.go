package slurm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNodeDefs(t *testing.T) {
	conf := `# a comment
ClusterName=c
nodename=DEFAULT CPUs=2
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=26818 CPUs=2   # trailing
NODENAME=gpu[001-004] \
   NodeHostname=h[1-4] RealMemory=1000
Include nodes.conf
PartitionName=p Nodes=ALL
`
	nodes, incs := ParseNodeDefs([]byte(conf))
	want := []NodeDef{{Name: "n1", Hostname: "localhost"}, {Name: "gpu[001-004]", Hostname: "h[1-4]"}}
	if len(nodes) != len(want) {
		t.Fatalf("ParseNodeDefs = %+v, want %+v", nodes, want)
	}
	for i := range want {
		if nodes[i] != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, nodes[i], want[i])
		}
	}
	if len(incs) != 1 || incs[0] != "nodes.conf" {
		t.Errorf("includes = %q, want [nodes.conf]", incs)
	}
}

func TestMatchNodeName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nodes   []NodeDef
		host    string
		want    string
		wantErr string
		noName  bool
	}{
		{name: "name is host", nodes: []NodeDef{{Name: "a1"}, {Name: "a2"}}, host: "a2", want: "a2"},
		{name: "by NodeHostname", nodes: []NodeDef{{Name: "n1", Hostname: "vm"}}, host: "vm", want: "n1"},
		{name: "NodeName alone does not match when NodeHostname differs", nodes: []NodeDef{{Name: "vm", Hostname: "other"}}, host: "vm", noName: true},
		{name: "hostlist", nodes: []NodeDef{{Name: "gpu[001-064]"}}, host: "gpu017", want: "gpu017"},
		{name: "paired hostlists", nodes: []NodeDef{{Name: "gpu[001-004]", Hostname: "h[1-4]"}}, host: "h3", want: "gpu003"},
		{name: "none", nodes: []NodeDef{{Name: "a[1-3]"}}, host: "b1", noName: true},
		{name: "several on one host", nodes: []NodeDef{{Name: "n1", Hostname: "localhost"}, {Name: "n2", Hostname: "localhost"}}, host: "localhost", wantErr: "2 nodes on host localhost (n1, n2)"},
		{name: "one host for a list", nodes: []NodeDef{{Name: "n[1-3]", Hostname: "localhost"}}, host: "localhost", wantErr: "3 nodes"},
		{name: "bad hostlist", nodes: []NodeDef{{Name: "n[3-"}}, host: "n3", wantErr: "NodeName=n[3-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MatchNodeName(tc.nodes, tc.host)
			switch {
			case tc.noName:
				if !errors.Is(err, ErrNoNodeName) {
					t.Fatalf("MatchNodeName = %q, %v; want ErrNoNodeName", got, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("MatchNodeName = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
			case err != nil || got != tc.want:
				t.Fatalf("MatchNodeName = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestLookupNodeNameFollowsIncludes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("slurm.conf", "ClusterName=c\nInclude nodes.d/*.conf\n")
	if err := os.Mkdir(filepath.Join(dir, "nodes.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("nodes.d/gpu.conf", "NodeName=gpu[01-08] NodeHostname=g[01-08]\n")
	got, err := LookupNodeName(filepath.Join(dir, "slurm.conf"), "g05")
	if err != nil || got != "gpu05" {
		t.Fatalf("LookupNodeName = %q, %v; want gpu05", got, err)
	}
	if _, err := LookupNodeName(filepath.Join(dir, "missing.conf"), "g05"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LookupNodeName(missing) err = %v, want ErrNotExist", err)
	}
	write("loop.conf", "Include loop.conf\n")
	if _, err := LookupNodeName(filepath.Join(dir, "loop.conf"), "g05"); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Errorf("LookupNodeName(loop) err = %v, want nesting error", err)
	}
}
