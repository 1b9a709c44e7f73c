package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildLLMGW builds this command into a temporary directory: the demo
// re-executes its own binary as coordinator and agents, which a test
// binary cannot stand in for.
func buildLLMGW(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "llmgw")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fuseHere says whether the demo can mount its filer with FUSE here.
func fuseHere() bool {
	_, err := exec.LookPath("bindfs")
	_, derr := os.Stat("/dev/fuse")
	return os.Geteuid() == 0 && err == nil && derr == nil
}

// leftovers lists what of a demo run under parent is still there: files,
// processes whose command line names it, mounts under it.
func leftovers(t *testing.T, parent string) []string {
	t.Helper()
	var left []string
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		left = append(left, "file "+filepath.Join(parent, e.Name()))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(parent)) {
			left = append(left, "process "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if m, err := os.ReadFile("/proc/mounts"); err == nil && bytes.Contains(m, []byte(parent)) {
		left = append(left, "a mount under "+parent)
	}
	return left
}

// TestDemo runs `llmgw demo` end to end, as `make demo` does, without the
// dev cluster: every step's key line must show, and nothing may be left.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo (about 15 s)")
	}
	bin := buildLLMGW(t)
	modes := []struct {
		name string
		args []string
		fuse bool
	}{{"auto", nil, fuseHere()}}
	if fuseHere() {
		modes = append(modes, struct {
			name string
			args []string
			fuse bool
		}{"no-fuse", []string{"--no-fuse"}, false})
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"demo", "--no-cluster", "--tmp", parent}, m.args...)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			text := out.String()
			if err != nil {
				t.Fatalf("llmgw demo: %v after %s\n%s", err, time.Since(start).Round(time.Millisecond), text)
			}
			t.Logf("llmgw demo (%s) took %s", m.name, time.Since(start).Round(time.Millisecond))

			want := []string{
				// Step by step, in order.
				`\[1/8\] The coordinator`,
				`serving on http://127\.0\.0\.1:\d+`,
				`all 4 agents have reported: n1,n2 in fabric ib-a, n3,n4 in ib-b`,
				`mistral-7b -> http://127\.0\.0\.1:\d+/mistral-7b\.gguf`,
				`n1 \[=+\] 100%  134 MB of 134 MB`,
				`done in [\d.]+s: \$DEMO/n1/cache/[0-9a-f]{16}-mistral-7b\.gguf`,
				// status: the local holder, the fetched model, the fetch
				// under way, the stale node.
				`qwen-7b +ib-b +local +local on 1 node +n3`,
				`mistral-7b +ib-a +local +local on 1 node +n1`,
				`mistral-7b +ib-b +none +a job fetches 134 MB +- +n3 \d+%`,
				`STALE: no report for over 6s`,
				`n4 +ib-b +stale`,
				`\[7/8\] llmgw place`,
				`\[8/8\] A real job with llmgw sbatch`,
				`Cleaned up in [\d.]+s: \d+ processes stopped`,
			}
			if m.fuse {
				want = append(want, `llama-70b +ib-a +shared +filer \(2 nodes\) +n\[1-2\]`, `\$DEMO/filer: fuse \(shared\)`, "the FUSE mount unmounted")
			} else {
				want = append(want, `Simulated shared \(no FUSE here`, `llama-70b +ib-a +local +local on 2 nodes +n\[1-2\]`)
			}
			for _, w := range want {
				if !regexp.MustCompile(w).MatchString(text) {
					t.Errorf("the output lacks %s", w)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", text)
			}
			if left := leftovers(t, parent); len(left) > 0 {
				t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestDemoInterrupted stops the demo with Ctrl-C (SIGINT) in the middle of
// its fetch: it must stop everything it started and remove its directory.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs part of the demo")
	}
	t.Parallel()
	bin := buildLLMGW(t)
	parent := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--no-cluster", "--tmp", parent)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	signalled := false
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if !signalled && strings.Contains(out.String(), "n1 [") {
			// The fetch is under way: coordinator, agents and origin run.
			cmd.Process.Signal(syscall.SIGINT)
			signalled = true
		}
		if err != nil {
			break
		}
	}
	err = cmd.Wait()
	text := out.String()
	if !signalled {
		t.Fatalf("the fetch never started:\n%s", text)
	}
	if err == nil || !strings.Contains(text, "llmgw demo: interrupted") || !strings.Contains(text, "Cleaned up in") {
		t.Errorf("after SIGINT: %v, want exit 1 saying it was interrupted and cleaned up:\n%s", err, text)
	}
	if left := leftovers(t, parent); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
}
