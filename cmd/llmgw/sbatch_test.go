package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
)

// fakeSlurm writes an sinfo that prints the dev cluster's layout (n2 holds
// m1, n3 and n4 hold m3) and an sbatch that records its arguments and
// submits job 7; `sbatch --help` mentions --llmgw-model when spank is true.
// These stand in for Slurm only in these unit tests of the wiring; the
// integration tests (slurm/submit_integration_test.go) use the real one.
func fakeSlurm(t *testing.T, spank bool) (dir, argsLog string) {
	t.Helper()
	dir = t.TempDir()
	argsLog = filepath.Join(dir, "args")
	help := "Usage: sbatch [OPTIONS(0)...]"
	if spank {
		help += "\n      --llmgw-model=NAME      Model the job uses (llmgw)"
	}
	files := map[string]string{
		"sinfo": "#!/bin/sh\nprintf 'n1|debug*|ib-a\\nn2|debug*|ib-a,llmgw.m1\\nn3|debug*|ib-b,llmgw.m3\\nn4|debug*|ib-b,llmgw.m3\\n'\n",
		"sbatch": `#!/bin/sh
if [ "$1" = --help ]; then echo "` + help + `"; exit 0; fi
echo "$*" >>` + argsLog + `
for a in "$@"; do
	case $a in --fail) echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 3;; esac
	case $a in --parsable) echo 7; exit 0;; esac
done
echo "Submitted batch job 7"
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, argsLog
}

// placementServer answers GET /v1/placement with noRoom failing the disk
// check and every other node fine, and no view of Slurm's nodes (a
// coordinator whose feature reconciler is off).
func placementServer(t *testing.T, noRoom ...string) (*httptest.Server, *http.Request) {
	t.Helper()
	return placementServerView(t, nil, noRoom...)
}

// placementServerView is placementServer whose answer carries view when
// asked for it.
func placementServerView(t *testing.T, view *api.FeatureView, noRoom ...string) (*httptest.Server, *http.Request) {
	t.Helper()
	var last http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/placement" {
			http.NotFound(w, r)
			return
		}
		last = *r
		type node = api.PlacementNode
		var ans api.Placement
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			fails := false
			for _, x := range noRoom {
				fails = fails || x == n
			}
			holds := n == "n2" && r.URL.Query().Get("model") == "m1"
			ans.Nodes = append(ans.Nodes, node{Node: n, Holder: holds, NoRoom: fails && !holds})
		}
		if r.URL.Query().Get("view") == "1" {
			ans.View = view
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

func readArgs(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSbatchAddsPreferExcludeAndComment(t *testing.T) {
	dir, argsLog := fakeSlurm(t, false)
	srv, req := placementServer(t, "n2", "n3")
	code, stdout, stderr := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": srv.URL},
		"sbatch", "--model", "m1", "--slurm-dir", dir, "-N", "1", "--comment=mine", "--wrap", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != "Submitted batch job 7\n" {
		t.Errorf("stdout %q: sbatch's own output must pass through", stdout)
	}
	// n2 holds m1 so is never excluded although it fails the disk check.
	want := "-N 1 --comment=mine --wrap true --prefer=llmgw.m1 --exclude=n3 --comment=mine llmgw:model=m1 llmgw:composed\n"
	if got := readArgs(t, argsLog); got != want {
		t.Errorf("sbatch args:\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(stderr, "adding --prefer=llmgw.m1") {
		t.Errorf("stderr does not say what was added: %q", stderr)
	}
	if q := req.URL.Query(); q.Get("model") != "m1" || q.Get("count") != "1" || q.Get("view") != "1" {
		t.Errorf("placement query %q", req.URL.RawQuery)
	}
}

// TestSbatchTakesNodesFromCoordinator: with the coordinator's view of
// Slurm's nodes, sbatch composes from it, default partition included, and
// never runs sinfo (slurmctld is not asked for every node by every
// submission).
func TestSbatchTakesNodesFromCoordinator(t *testing.T) {
	dir, argsLog := fakeSlurm(t, false)
	marker := filepath.Join(dir, "sinfo-ran")
	if err := os.WriteFile(filepath.Join(dir, "sinfo"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// n5 holds m1 too, but is not in the default partition: a job that
	// names none can have only n2 as a holder.
	view := &api.FeatureView{Default: "debug", Nodes: []api.FeatureViewNode{
		{Name: "n1", Partitions: []string{"debug"}, Features: []string{"ib-a"}},
		{Name: "n2", Partitions: []string{"debug"}, Features: []string{"ib-a", "llmgw.m1"}},
		{Name: "n3", Partitions: []string{"debug"}, Features: []string{"ib-b"}},
		{Name: "n5", Partitions: []string{"other"}, Features: []string{"ib-a", "llmgw.m1"}},
	}}
	srv, _ := placementServerView(t, view, "n3")
	code, _, stderr := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": srv.URL},
		"sbatch", "--model", "m1", "--slurm-dir", dir, "-N", "2", "--wrap", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "-N 2 --wrap true --prefer=llmgw.m1*1 --exclude=n3 --comment=llmgw:model=m1 llmgw:composed\n"
	if got := readArgs(t, argsLog); got != want {
		t.Errorf("sbatch args:\n got %q\nwant %q", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("sinfo ran although the coordinator gave its view of the nodes")
	}
}

func TestSbatchScriptDirectivesAndSpank(t *testing.T) {
	dir, argsLog := fakeSlurm(t, true)
	srv, _ := placementServer(t)
	script := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH --constraint=ib-a\n#SBATCH -N 2\nsrun true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": srv.URL, "LLMGW_SLURM_DIR": dir},
		"sbatch", "--parsable", "--model=m1", script, "arg1", "--model", "x")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != "7\n" {
		t.Errorf("--parsable output %q", stdout)
	}
	// The script's constraint is folded in (a preference would otherwise
	// replace it); -N 2 with 1 holder gives the count form, in brackets beside the constraint; the plugin is
	// loaded, so the model goes in --llmgw-model, not the comment (which
	// only says llmgw sbatch composed the job). What
	// follows the script is the script's.
	want := "--parsable --prefer=[(ib-a&llmgw.m1)*1&ib-a*1] --comment=llmgw:composed --llmgw-model=m1 " + script + " arg1 --model x\n"
	if got := readArgs(t, argsLog); got != want {
		t.Errorf("sbatch args:\n got %q\nwant %q", got, want)
	}
}

func TestSbatchCoordinatorUnreachable(t *testing.T) {
	dir, argsLog := fakeSlurm(t, false)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	code, _, stderr := llmgwRun(t, map[string]string{"LLMGW_SLURM_DIR": dir},
		"sbatch", "--model", "m1", "--coordinator", "http://"+addr, "--wrap", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got, want := readArgs(t, argsLog), "--wrap true --comment=llmgw:model=m1 llmgw:composed\n"; got != want {
		// The marker keeps job_submit.lua from adding a preference from a
		// feature file that a coordinator that is down no longer updates.
		t.Errorf("sbatch args %q, want %q: only the model recorded", got, want)
	}
	if !strings.Contains(stderr, "warning: no placement from the coordinator") {
		t.Errorf("no warning on stderr: %q", stderr)
	}
}

func TestSbatchPassesExitStatusThrough(t *testing.T) {
	dir, _ := fakeSlurm(t, false)
	code, _, stderr := llmgwRun(t, map[string]string{"LLMGW_SLURM_DIR": dir}, "sbatch", "--model", "m1", "--fail", "--wrap", "true")
	if code != 3 {
		t.Errorf("exit %d, want sbatch's 3", code)
	}
	if !strings.Contains(stderr, "Invalid account") {
		t.Errorf("sbatch's stderr not passed through: %q", stderr)
	}
}

func TestSbatchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"sbatch", "--wrap", "true"},
		{"sbatch", "--model", "a|b", "--wrap", "true"},
		{"sbatch", "--model", "m1", "--llmgw-model=m2", "--wrap", "true"},
		{"sbatch", "--model", "m1", "-N"},
	} {
		if code, _, stderr := llmgwRun(t, nil, args...); code != 2 {
			t.Errorf("%q: exit %d (%s), want 2", args, code, stderr)
		}
	}
	code, stdout, _ := llmgwRun(t, nil, "sbatch", "--help")
	if code != 0 || !strings.Contains(stdout, "--model") {
		t.Errorf("--help: exit %d, %q", code, stdout)
	}
}

// The job_submit module cannot import the Go constant, so it repeats it;
// this keeps the two from drifting apart, which would make it prefer
// features no node carries (a rejected job) or none at all.
func TestLuaPrefixIsPlacements(t *testing.T) {
	b, err := os.ReadFile("../../slurm/lua/llmgw_submit.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := `PREFIX = "` + placement.FeaturePrefix + `"`
	if !strings.Contains(string(b), want) {
		t.Errorf("llmgw_submit.lua does not set %s", want)
	}
}
