package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseDefault(t *testing.T) {
	for out, want := range map[string]string{
		"debug*\np12\n": "debug",
		"p1\ngpu*\n":    "gpu",
		"p1\np2\n":      "",
		"":              "",
	} {
		if got := parseDefault([]byte(out)); got != want {
			t.Errorf("parseDefault(%q) = %q, want %q", out, got, want)
		}
	}
}

// nodeListing is the text forms of one listing captured from a release
// (scripts/capture-fixtures), read as ReadNodes and UnlistedNodes read
// them, each node as "name active|available|state|partitions|addr".
func nodeListing(t *testing.T, rel, set string) (listed []string, dflt string, unlisted []string) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", rel, set, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	list, err := ParseNodeList(read("sinfo-nodes-list.txt"))
	if err != nil {
		t.Fatalf("ParseNodeList: %v", err)
	}
	sets, err := ParseAvailableSets(read("sinfo-available-sets.txt"))
	if err != nil {
		t.Fatalf("ParseAvailableSets: %v", err)
	}
	if err := fillAvailable(list.Nodes, sets); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Nodes, func(a, b Node) int {
		if NodeLess(a.Name, b.Name) {
			return -1
		}
		return 1
	})
	for _, n := range list.Nodes {
		listed = append(listed, fmt.Sprintf("%s %s|%s|%s|%s|%s", n.Name, strings.Join(n.Active, ","), strings.Join(n.Available, ","),
			n.State, strings.Join(n.Partitions, ","), n.Addr))
	}
	all, err := ParseShowNodes(read("scontrol-show-nodes-oneline.txt"))
	if err != nil {
		t.Fatalf("ParseShowNodes: %v", err)
	}
	seen := map[string]bool{}
	for _, n := range list.Nodes {
		seen[n.Name] = true
	}
	for _, n := range all {
		if !seen[n.Name] {
			unlisted = append(unlisted, fmt.Sprintf("%s %s|%s|%s", n.Name, strings.Join(n.Active, ","), strings.Join(n.Available, ","), n.State))
		}
	}
	return listed, list.Default, unlisted
}

// TestNodeListingsOfEachRelease: the text forms ReadNodes and
// UnlistedNodes read, as each release printed them (scripts/capture-fixtures
// with LLMGW_CAPTURE_LISTS=1): a node in two partitions is one node with
// both; the default partition is found; sinfo's grouped available sets
// give every listed node its own; a config record partly FUTURE (f[1-3],
// f1 brought up) and a node in no partition (f4) are the nodes scontrol
// -a -F shows and sinfo does not.
func TestNodeListingsOfEachRelease(t *testing.T) {
	for _, rel := range []string{"22.05", "24.11", "26.05"} {
		t.Run(rel, func(t *testing.T) {
			listed, dflt, unlisted := nodeListing(t, rel, "mixed")
			want := []string{
				"n1 ib-a|ib-a|mixed|debug|127.0.0.1",
				"n2 ib-a,llmgw.m1|ib-a,llmgw.m1,llmgw.qwen-2.5|idle|debug|127.0.0.1",
				"n3 ib-b|ib-b|drained|debug,gpu|127.0.0.1",
				"n4 ib-b|ib-b|down|debug,gpu|127.0.0.1",
			}
			// Partitions come in sinfo's order, which differs by release.
			for i := range listed {
				listed[i] = strings.Replace(listed[i], "gpu,debug", "debug,gpu", 1)
			}
			if strings.Join(listed, "\n") != strings.Join(want, "\n") || dflt != "debug" || len(unlisted) != 0 {
				t.Errorf("mixed:\n%s\ndefault %q, unlisted %q\nwant\n%s", strings.Join(listed, "\n"), dflt, unlisted, strings.Join(want, "\n"))
			}
			listed, _, unlisted = nodeListing(t, rel, "future")
			if len(listed) != 5 || listed[0] != "f1 llmgw.m1|llmgw.m1,llmgw.qwen-2.5|idle*|fut|127.0.0.1" {
				t.Errorf("future: listed %q", listed)
			}
			if want := "f2 ||FUTURE f3 ||FUTURE f4 ||UNKNOWN"; strings.Join(unlisted, " ") != want {
				t.Errorf("future: unlisted %q, want %q", unlisted, want)
			}
		})
	}
}

// TestUnlistedNodes: what scontrol -a -F lists and sinfo did not, marked.
func TestUnlistedNodes(t *testing.T) {
	fixture, _ := filepath.Abs(filepath.Join("testdata", "24.11", "future", "scontrol-show-nodes-oneline.txt"))
	dir := fakeSlurm(t, map[string]string{
		"scontrol": `[ "$*" = "-a -F -o show node" ] || { echo "unexpected: $*" >&2; exit 1; }
exec cat '` + fixture + `'`,
	})
	listed := []Node{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}, {Name: "n4"}, {Name: "f1"}}
	got, err := (&Runner{Dir: dir}).UnlistedNodes(context.Background(), listed)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]Node{{Name: "f2", State: "FUTURE", Unlisted: true}, {Name: "f3", State: "FUTURE", Unlisted: true}, {Name: "f4", State: "UNKNOWN", Unlisted: true}}) {
		t.Errorf("UnlistedNodes = %+v", got)
	}
}

func TestParseNodeListErrors(t *testing.T) {
	for _, out := range []string{
		"n1|ib-a|odd|idle|debug*|a|h\n", // a feature with '|'
		"n1|ib-a|idle|debug*|a\n",
		"|ib-a|idle|debug*|a|h\n",
	} {
		if _, err := ParseNodeList([]byte(out)); !isTextError(err) {
			t.Errorf("ParseNodeList(%q): %v, want a text error", out, err)
		}
	}
	for _, out := range []string{"n1|a|b\n", "n[1-2]|a\nn2|b\n", "n[2-1]|a\n"} {
		if _, err := ParseAvailableSets([]byte(out)); !isTextError(err) {
			t.Errorf("ParseAvailableSets(%q): %v, want a text error", out, err)
		}
	}
	if _, err := ParseShowNodes([]byte("Arch=x86_64 State=IDLE\n")); err == nil {
		t.Errorf("ParseShowNodes of a line without NodeName: no error")
	}
	if got, _ := ParseShowNodes([]byte("NodeName=x ReasonText=NodeName=y AvailableFeatures=a,b State=IDLE+DRAIN Reason=State=bad\n")); fmt.Sprint(got) != fmt.Sprint([]Node{{Name: "x", Available: l("a", "b"), State: "IDLE+DRAIN"}}) {
		t.Errorf("ParseShowNodes took a value from inside another: %+v", got)
	}
}
