package slurm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseNodes(t *testing.T) {
	tests := []struct {
		file string
		want []Node
	}{
		{
			// The dev cluster just after scripts/dev-cluster up.
			file: "sinfo-nodes-fresh.txt",
			want: []Node{
				{Name: "n1", Available: []string{"ib-a"}, Active: []string{"ib-a"}, State: "idle"},
				{Name: "n2", Available: []string{"ib-a"}, Active: []string{"ib-a"}, State: "idle"},
				{Name: "n3", Available: []string{"ib-b"}, Active: []string{"ib-b"}, State: "idle"},
				{Name: "n4", Available: []string{"ib-b"}, Active: []string{"ib-b"}, State: "idle"},
			},
		},
		{
			// scontrol update gave n2 model features (one with a space) and
			// n4 none; n3 drained; a second partition gpu=n[3-4] makes sinfo
			// print n3 and n4 twice; a one-CPU job makes n1 mixed.
			file: "sinfo-nodes-mixed.txt",
			want: []Node{
				{Name: "n1", Available: []string{"ib-a"}, Active: []string{"ib-a"}, State: "mixed"},
				{Name: "n2", Available: []string{"ib-a", "m_llama", "m_qwen", "a b"}, Active: []string{"ib-a", "m_llama"}, State: "idle"},
				{Name: "n3", Available: []string{"ib-b"}, Active: []string{"ib-b"}, State: "drained"},
				{Name: "n4", Available: nil, Active: nil, State: "idle"},
			},
		},
		{
			// Exclusive jobs on n1 and n2, then n2 drained under its job;
			// n4 set DOWN.
			file: "sinfo-nodes-states.txt",
			want: []Node{
				{Name: "n1", Available: []string{"ib-a"}, Active: []string{"ib-a"}, State: "allocated"},
				{Name: "n2", Available: []string{"ib-a", "m_llama", "m_qwen", "a b"}, Active: []string{"ib-a", "m_llama"}, State: "draining"},
				{Name: "n3", Available: []string{"ib-b"}, Active: []string{"ib-b"}, State: "drained"},
				{Name: "n4", Available: nil, Active: nil, State: "down"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "22.05", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseNodes(data)
			if err != nil {
				t.Fatalf("ParseNodes: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseNodes(%s) =\n  %+v\nwant\n  %+v", tc.file, got, tc.want)
			}
		})
	}
}

func TestParseNodesErrors(t *testing.T) {
	tests := []struct {
		name, out, errPart string
	}{
		{"too few fields", "n1|ib-a|idle\n", "want 4"},
		{"too many fields", "n1|a|b|c|idle\n", "want 4"},
		{"empty name", "|ib-a|ib-a|idle\n", "empty node name"},
		{"empty state", "n1|ib-a|ib-a|\n", "empty node name or state"},
		{"error text instead of nodes", "slurm_load_node: Unable to contact slurm controller\n", "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNodes([]byte(tc.out))
			if err == nil {
				t.Fatalf("ParseNodes(%q) = %v, want an error", tc.out, got)
			}
			if !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("ParseNodes(%q) error = %q, want it to contain %q", tc.out, err, tc.errPart)
			}
		})
	}
	if got, err := ParseNodes(nil); err != nil || got != nil {
		t.Errorf("ParseNodes(nil) = %v, %v; want nil, nil", got, err)
	}
}

// fakeSlurm writes executable scripts named after Slurm commands into a
// temporary directory and returns it, for Runner.Dir.
func fakeSlurm(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunnerNodes(t *testing.T) {
	fixture, err := filepath.Abs(filepath.Join("testdata", "22.05", "sinfo-json-features.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The fake sinfo checks it got exactly the arguments Nodes relies on:
	// a changed format string must not pass against a fixture of the old one.
	dir := fakeSlurm(t, map[string]string{
		"sinfo": `[ "$*" = "-N --json" ] || { echo "sinfo: unexpected arguments: $*" >&2; exit 1; }
exec cat '` + fixture + `'`,
	})
	r := &Runner{Dir: dir}
	nodes, err := r.Nodes(context.Background())
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if got, want := Compress(names), "n[1-4]"; got != want {
		t.Errorf("Nodes() names = %s, want %s", got, want)
	}
}

func TestRunnerRun(t *testing.T) {
	dir := fakeSlurm(t, map[string]string{
		"echoargs": `for a in "$@"; do printf '<%s>' "$a"; done`,
		"fail":     `echo partial; echo "scontrol: error: Invalid node name specified" >&2; exit 1`,
		"showconf": `printf '%s' "$SLURM_CONF"`,
		"hang":     `exec sleep 10`,
		// Exits at once but leaves a child holding stdout open.
		"leak": `sleep 10 & echo started`,
	})
	ctx := context.Background()

	t.Run("arguments are passed as a vector, not through a shell", func(t *testing.T) {
		r := &Runner{Dir: dir}
		out, err := r.Run(ctx, "echoargs", "a b", "$HOME", "x;y", "")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(out), "<a b><$HOME><x;y><>"; got != want {
			t.Errorf("Run output = %q, want %q", got, want)
		}
	})

	t.Run("non-zero exit names the command and carries stderr", func(t *testing.T) {
		r := &Runner{Dir: dir}
		out, err := r.Run(ctx, "fail", "update", "NodeName=x")
		var ce *CommandError
		if !errors.As(err, &ce) {
			t.Fatalf("Run error = %v (%T), want *CommandError", err, err)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("Run error does not unwrap to exit status 1: %v", err)
		}
		want := "fail update NodeName=x: exit status 1: scontrol: error: Invalid node name specified"
		if err.Error() != want {
			t.Errorf("Run error = %q, want %q", err, want)
		}
		if string(out) != "partial\n" {
			t.Errorf("Run stdout on failure = %q, want %q", out, "partial\n")
		}
	})

	t.Run("Env is added to the environment", func(t *testing.T) {
		r := &Runner{Dir: dir, Env: []string{"SLURM_CONF=/x/slurm.conf"}}
		out, err := r.Run(ctx, "showconf")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != "/x/slurm.conf" {
			t.Errorf("command saw SLURM_CONF=%q, want /x/slurm.conf", out)
		}
	})

	t.Run("timeout kills the command", func(t *testing.T) {
		r := &Runner{Dir: dir, Timeout: 100 * time.Millisecond}
		start := time.Now()
		_, err := r.Run(ctx, "hang")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run error = %v, want one wrapping context.DeadlineExceeded", err)
		}
		if !strings.Contains(err.Error(), "hang: no answer within 100ms") {
			t.Errorf("Run error = %q, want it to name the command and the timeout", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Run took %v after a 100ms timeout", d)
		}
	})

	t.Run("caller's cancellation is reported as such", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := (&Runner{Dir: dir}).Run(cctx, "hang")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run error = %v, want one wrapping context.Canceled", err)
		}
	})

	t.Run("WaitDelay bounds a child that holds stdout open", func(t *testing.T) {
		r := &Runner{Dir: dir, WaitDelay: 100 * time.Millisecond}
		start := time.Now()
		out, _ := r.Run(ctx, "leak")
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Run waited %v for a leftover child's stdout", d)
		}
		if !strings.Contains(string(out), "started") {
			t.Errorf("Run output = %q, want what the command printed before exiting", out)
		}
	})

	t.Run("missing command", func(t *testing.T) {
		_, err := (&Runner{Dir: dir}).Run(ctx, "sinfo")
		if err == nil || !strings.Contains(err.Error(), "sinfo: ") || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Run of a missing command: error = %v, want one naming sinfo and wrapping os.ErrNotExist", err)
		}
	})

	t.Run("paths are refused", func(t *testing.T) {
		for _, name := range []string{"/bin/sh", "../sinfo", ""} {
			_, err := (&Runner{Dir: dir}).Run(ctx, name)
			if err == nil || !strings.Contains(err.Error(), "bare command name") {
				t.Errorf("Run(%q) error = %v, want a refusal", name, err)
			}
		}
	})

	t.Run("defaults", func(t *testing.T) {
		// The zero Runner looks in /usr/bin; true is there on Debian.
		if _, err := os.Stat("/usr/bin/true"); err != nil {
			t.Skip("no /usr/bin/true")
		}
		if _, err := (&Runner{}).Run(ctx, "true"); err != nil {
			t.Errorf("zero Runner Run(true): %v", err)
		}
	})
}
