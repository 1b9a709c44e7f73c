package slurm

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// releaseDirs are the fixture directories captured from real Slurm releases
// by scripts/capture-fixtures, one per release: every parser is tested
// against each of them.
func releaseDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "version.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 3 {
		t.Fatalf("want fixtures of at least three releases (22.05, 24.11, 26.05) in testdata/*/version.txt, found %d; run scripts/capture-fixtures", len(dirs))
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	return dirs
}

func readFixture(t *testing.T, path ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The cluster scripts/capture-fixtures sets up: n[1-2] ib-a in partition
// debug, n[3-4] ib-b in debug and gpu; then, for mixed/, a job on n1, llmgw
// features on n2 (one available only), n3 drained, n4 down.
var (
	fixtureFresh = []Node{
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug")},
		{Name: "n2", Available: l("ib-a"), Active: l("ib-a"), State: "idle", Partitions: l("debug")},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug", "gpu")},
		{Name: "n4", Available: l("ib-b"), Active: l("ib-b"), State: "idle", Partitions: l("debug", "gpu")},
	}
	fixtureMixed = []Node{
		{Name: "n1", Available: l("ib-a"), Active: l("ib-a"), State: "mixed", Partitions: l("debug")},
		{Name: "n2", Available: l("ib-a", "llmgw.m1", "llmgw.qwen-2.5"), Active: l("ib-a", "llmgw.m1"), State: "idle", Partitions: l("debug")},
		{Name: "n3", Available: l("ib-b"), Active: l("ib-b"), State: "drained", Partitions: l("debug", "gpu")},
		{Name: "n4", Available: l("ib-b"), Active: l("ib-b"), State: "down", Partitions: l("debug", "gpu")},
	}
)

// fixtureStates are the listings captured of each cluster state.
var fixtureStates = []struct {
	sub  string
	want []Node
}{{"fresh", fixtureFresh}, {"mixed", fixtureMixed}}

// TestParseNodesEveryRelease: every one-entry-per-node listing of every
// release reads as the cluster was, and the text form agrees.
func TestParseNodesEveryRelease(t *testing.T) {
	for _, dir := range releaseDirs(t) {
		for _, tc := range fixtureStates {
			for _, file := range []string{"sinfo-N-json.json", "scontrol-show-nodes-json.json"} {
				t.Run(filepath.Base(dir)+"/"+tc.sub+"/"+file, func(t *testing.T) {
					if _, err := os.Stat(filepath.Join(dir, tc.sub, file+".refused")); err == nil {
						t.Skipf("this release has no such listing (%s.refused)", file)
					}
					got, err := ParseNodesJSON(readFixture(t, dir, tc.sub, file))
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(withoutAddrs(t, got), tc.want) {
						t.Errorf("ParseNodesJSON =\n  %+v\nwant\n  %+v", got, tc.want)
					}
				})
			}
			t.Run(filepath.Base(dir)+"/"+tc.sub+"/sinfo-nodes.txt", func(t *testing.T) {
				got, err := ParseNodes(readFixture(t, dir, tc.sub, "sinfo-nodes.txt"))
				if err != nil {
					t.Fatal(err)
				}
				want := make([]Node, len(tc.want))
				for i, n := range tc.want {
					n.Partitions = nil // not in the text form
					want[i] = n
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("ParseNodes =\n  %+v\nwant\n  %+v", got, want)
				}
			})
		}
	}
}

// TestParseNodesGroupedNeverWrong: plain `sinfo --json` (no -N) groups
// nodes from 23.02 on, one record's features standing for all of its
// nodes. Read, it must give the truth or an error, never ib-a on an ib-b
// node.
func TestParseNodesGroupedNeverWrong(t *testing.T) {
	for _, dir := range releaseDirs(t) {
		for _, tc := range fixtureStates {
			t.Run(filepath.Base(dir)+"/"+tc.sub, func(t *testing.T) {
				got, err := ParseNodesJSON(readFixture(t, dir, tc.sub, "sinfo-json.json"))
				if err != nil {
					rel := strings.TrimSpace(string(readFixture(t, dir, "version.txt")))
					if f := strings.Fields(rel); !strings.Contains(err.Error(), f[len(f)-1]) {
						t.Errorf("error %q does not name the release %s", err, rel)
					}
					if !strings.Contains(err.Error(), "sinfo -N --json") {
						t.Errorf("error %q does not say what to run instead", err)
					}
					return
				}
				// Grouped records come in sinfo's grouping order.
				slices.SortFunc(got, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
				if !reflect.DeepEqual(withoutAddrs(t, got), tc.want) {
					t.Errorf("ParseNodesJSON =\n  %+v\nwant\n  %+v", got, tc.want)
				}
			})
		}
	}
}

// TestRunnerNodesEveryRelease: Runner.Nodes asks for one entry per node and
// reads every release's answer; where sinfo prints no JSON, it reads the
// text form.
func TestRunnerNodesEveryRelease(t *testing.T) {
	for _, dir := range releaseDirs(t) {
		abs, err := filepath.Abs(filepath.Join(dir, "mixed"))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			r := &Runner{Dir: fakeSlurm(t, map[string]string{
				"sinfo": `case "$*" in
"-N --json") exec cat '` + abs + `/sinfo-N-json.json' ;;
*) echo "sinfo: unexpected arguments: $*" >&2; exit 1 ;;
esac`,
			})}
			got, err := r.Nodes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(withoutAddrs(t, got), fixtureMixed) {
				t.Errorf("Nodes() =\n  %+v\nwant\n  %+v", got, fixtureMixed)
			}
		})
		t.Run(filepath.Base(dir)+"/text", func(t *testing.T) {
			r := &Runner{Dir: fakeSlurm(t, map[string]string{
				"sinfo": `case "$*" in
"-N --json") echo "sinfo: error: Unable to find plugin: serializer/json" >&2; exit 1 ;;
"-N -h -o %N|%f|%b|%T") exec cat '` + abs + `/sinfo-nodes.txt' ;;
*) echo "sinfo: unexpected arguments: $*" >&2; exit 1 ;;
esac`,
			})}
			got, err := r.Nodes(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 4 || got[1].Name != "n2" || !reflect.DeepEqual(got[1].Active, l("ib-a", "llmgw.m1")) {
				t.Errorf("Nodes() from the text form = %+v", got)
			}
		})
	}
}

// TestShowConfigEveryRelease reads the hook settings back from each
// release's `scontrol show config` for the slurm.conf variants
// scripts/capture-fixtures starts slurmctld with: one Prolog (22.05 prints
// "Prolog", 24.05 and later "Prolog[0]"), two Prolog= lines, a glob, and
// PrologTimeout beside PrologEpilogTimeout (25.05 and later; older
// releases refuse the key, recorded in a .refused file).
func TestShowConfigEveryRelease(t *testing.T) {
	const h = "/var/tmp/llmgw-fixtures/hooks/"
	for _, dir := range releaseDirs(t) {
		for _, tc := range []struct {
			variant         string
			prolog, epilog  []string
			timeout, tokey  string
			refusedBeforeMM string
		}{
			{"base", l(h + "prolog"), l(h + "epilog"), "600", "PrologEpilogTimeout", ""},
			{"multi", l(h+"site-prolog", h+"prolog"), l(h + "epilog.d/*"), "65534", "PrologEpilogTimeout", ""},
			{"glob", l(h + "prolog.d/*"), l(h + "epilog"), "65534", "PrologEpilogTimeout", ""},
			{"timeouts", l(h + "prolog"), l(h + "epilog"), "60", "PrologTimeout", "25.05"},
		} {
			t.Run(filepath.Base(dir)+"/"+tc.variant, func(t *testing.T) {
				path := filepath.Join(dir, "scontrol-show-config-"+tc.variant+".txt")
				b, err := os.ReadFile(path)
				if os.IsNotExist(err) {
					if _, err := os.Stat(strings.TrimSuffix(path, ".txt") + ".refused"); err == nil && tc.refusedBeforeMM != "" && filepath.Base(dir) < tc.refusedBeforeMM {
						return // that release refuses the setting, as Slurm documents
					}
					if filepath.Base(dir) == "22.05" {
						t.Skip("22.05 was captured before scripts/capture-fixtures")
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				// The host's capture ran without a chroot, in a dir of its own.
				b = []byte(strings.ReplaceAll(string(b), "/var/tmp/llmgw-fixtures-host/c/", "/var/tmp/llmgw-fixtures/"))
				c, err := ParseShowConfig(b)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.prolog
				if filepath.Base(dir) < "24.05" {
					want = want[len(want)-1:] // one Prolog: the last line wins
				}
				if got := c.All("Prolog"); !reflect.DeepEqual(got, want) {
					t.Errorf("All(Prolog) = %q, want %q", got, want)
				}
				if got := c.All("Epilog"); !reflect.DeepEqual(got, tc.epilog) {
					t.Errorf("All(Epilog) = %q, want %q", got, tc.epilog)
				}
				if v, k := c.PrologTimeout(); v != tc.timeout || k != tc.tokey {
					t.Errorf("PrologTimeout() = %q from %s, want %q from %s", v, k, tc.timeout, tc.tokey)
				}
			})
		}
	}
}

// TestRunnerNodesNamesRelease: when neither form can be read, the error
// names the release sinfo --version gives.
func TestRunnerNodesNamesRelease(t *testing.T) {
	r := &Runner{Dir: fakeSlurm(t, map[string]string{
		"sinfo": `case "$*" in
"--version") echo "slurm-wlm 24.11.5" ;;
"-N --json") echo "not json" ;;
*) echo "n1|ib-a|idle" ;;
esac`,
	})}
	_, err := r.Nodes(context.Background())
	if err == nil || !strings.Contains(err.Error(), "(Slurm 24.11.5)") || !strings.Contains(err.Error(), "want 4 '|'-separated fields") {
		t.Errorf("Nodes() error = %v; want both forms' errors and the release", err)
	}
}

// TestParseFeatureNodesEveryRelease: the partition and feature listing that
// `llmgw sbatch` reads comes out the same on every release.
func TestParseFeatureNodesEveryRelease(t *testing.T) {
	for _, dir := range releaseDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got, def, err := ParseFeatureNodes(readFixture(t, dir, "mixed", "sinfo-partitions-features.txt"))
			if err != nil {
				t.Fatal(err)
			}
			var want []FeatureNode
			for _, n := range fixtureMixed {
				want = append(want, FeatureNode{Name: n.Name, Partitions: n.Partitions, Features: n.Active})
			}
			if def != "debug" || !reflect.DeepEqual(got, want) {
				t.Errorf("ParseFeatureNodes = %q, default %q; want %q, default debug", got, def, want)
			}
		})
	}
}

// TestRunnerNodesNoSecondWait: when the controller does not answer, the
// text form is not tried (it would wait as long again); when sinfo lacks
// its JSON plugin, it is.
func TestRunnerNodesNoSecondWait(t *testing.T) {
	calls := filepath.Join(t.TempDir(), "calls")
	r := &Runner{Dir: fakeSlurm(t, map[string]string{
		"sinfo": `echo "$*" >>'` + calls + `'
echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2; exit 1`,
	})}
	if _, err := r.Nodes(context.Background()); err == nil || !strings.Contains(err.Error(), "Unable to contact") {
		t.Fatalf("Nodes() error = %v", err)
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "\n") != 1 {
		t.Errorf("sinfo was run %q; want once", b)
	}
}

// withoutAddrs checks that where a listing names the nodes' addresses they
// are the fixture cluster's (every node on localhost; sinfo's records after
// 22.05 name none), and returns the nodes without them, to compare the rest.
func withoutAddrs(t *testing.T, nodes []Node) []Node {
	t.Helper()
	out := append([]Node(nil), nodes...)
	for i, n := range out {
		if n.Addr != "" && n.Addr != "127.0.0.1" || n.Hostname != "" && n.Hostname != "localhost" {
			t.Errorf("node %s: address %q, hostname %q; want 127.0.0.1 and localhost, or none", n.Name, n.Addr, n.Hostname)
		}
		out[i].Addr, out[i].Hostname = "", ""
	}
	return out
}
