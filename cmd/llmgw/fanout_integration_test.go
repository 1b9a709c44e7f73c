//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFanoutSmall runs issue 18's benchmark in its small mode
// (scripts/bench/fanout.sh --small: 3 fabrics of 2 nodes, 32 MiB, each node
// a network namespace with its own munged and agent, the management link
// shaped to 80 Mbit/s and the fabrics on bridges that are not connected) and
// checks what one copy per fabric means, not how fast it is: every node's
// job sees the file with the pinned sha256, the origin served each fabric
// once, and no non-seed node read model bytes over the management network.
// It needs no Slurm: the Prologs run as slurmd would run them, and the
// coordinator reads its node list from a stand-in for sinfo.
func TestFanoutSmall(t *testing.T) {
	bin := fanoutPrereqs(t)
	results := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../scripts/bench/fanout.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "bash", script, "--small", "--llmgw", bin, "--results", results)
	// The script's own cleanup runs on SIGTERM; a kill would leave its
	// namespaces and daemons behind. (Not SIGINT: a process started in the
	// background of a shell ignores it.)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("fanout.sh --small: %v\n%s", err, out.String())
	}
	t.Logf("fanout.sh --small:\n%s", tableOf(out.String()))
	r := readResults(t, results)

	size, nodes, fabrics := r.int("size"), r.int("nodes"), r.int("fabrics")
	if size != 32<<20 || nodes != 6 || fabrics != 3 {
		t.Fatalf("the small case is 32 MiB to 3 fabrics of 2 nodes; the script ran %d bytes to %d nodes in %d fabrics", size, nodes, fabrics)
	}
	if ok := r.int("on_nodes_ok"); ok != nodes {
		t.Errorf("%d of %d nodes have the verified file at their job's LLMGW_MODEL_PATH", ok, nodes)
	}
	if got, limit := r.int("on_origin_bytes"), int64(float64(3*size)*1.01); got > limit {
		t.Errorf("the origin served %d bytes (%.3f x S); one copy per fabric allows %d (1.01 x 3 x S)", got, float64(got)/float64(size), limit)
	}
	if seeds := strings.Fields(r.s["on_seeds"]); int64(len(seeds)) != fabrics {
		t.Errorf("seeds %q: want one per fabric", seeds)
	}
	// Model bytes on a non-seed node's management link: what the origin
	// sent it. The whole link (reports, swarm plans) is held to the table's
	// goal too.
	if got := r.int("on_nonseed_origin_bytes"); got >= 1_000_000 {
		t.Errorf("the origin sent a non-seed node %d bytes over the management network; want < 1 MB", got)
	}
	if got := r.int("on_nonseed_mgmt_bytes"); got >= 1_000_000 {
		t.Errorf("a non-seed node's management link carried %d bytes; want < 1 MB", got)
	}
}

// fanoutPrereqs returns the llmgw binary to test, or skips: the benchmark
// needs root (namespaces, tc, munged as munge), the tools it runs, and the
// host itself. scripts/test-integration runs the suite again inside other
// Debian releases' roots (chroot), where network namespaces are not set up
// and this test, which exercises no Slurm, would only repeat itself.
func fanoutPrereqs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, tc and munged")
	}
	bin := os.Getenv("LLMGW_BIN")
	if bin == "" {
		t.Skip("LLMGW_BIN is not set: run with scripts/test-integration, or set it to a built llmgw")
	}
	if root, err := os.Stat("/"); err == nil {
		if pid1, err := os.Stat("/proc/1/root/"); err == nil && !os.SameFile(root, pid1) {
			t.Skip("inside a release root (chroot): the fan-out benchmark runs once, on the host")
		}
	}
	for _, tool := range []string{"ip", "tc", "setpriv", "curl", "go", "bc", "numfmt"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the fan-out benchmark needs it", tool)
		}
	}
	if _, err := os.Stat("/usr/sbin/munged"); err != nil {
		t.Skip("munged is not installed (apt-get install munge)")
	}
	probe := fmt.Sprintf("fob-probe-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot make a network namespace here (%v: %s)", err, bytes.TrimSpace(out))
	}
	exec.Command("ip", "netns", "del", probe).Run()
	return bin
}

// tableOf is the script's table: its lines from the summary on.
func tableOf(out string) string {
	if i := strings.Index(out, "\nfan-out of "); i >= 0 {
		return out[i+1:]
	}
	return out
}

type fanoutResults struct {
	t *testing.T
	s map[string]string
}

func readResults(t *testing.T, path string) fanoutResults {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the script wrote no results: %v", err)
	}
	defer f.Close()
	r := fanoutResults{t: t, s: map[string]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r.s[k] = v
		}
	}
	return r
}

func (r fanoutResults) int(key string) int64 {
	r.t.Helper()
	v, err := strconv.ParseInt(r.s[key], 10, 64)
	if err != nil {
		r.t.Fatalf("results: %s=%q is not a number", key, r.s[key])
	}
	return v
}
