//go:build integration

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/internal/fusetest"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestHookHungMount runs the built hook against weights on a FUSE mount
// whose daemon is stopped, as a filer that stopped answering: the Prolog
// must come back by itself (exit 0, without handing the job to llmgw,
// whose full path would only hang as well) and the TaskProlog fails the
// job saying which weights did not answer. Slurm kills a Prolog that
// outlives PrologEpilogTimeout and drains the node.
//
// Needs root and bindfs: sudo go test -tags integration -run Hung ./cmd/llmgw-hook/
func TestHookHungMount(t *testing.T) {
	fusetest.Need(t)
	dir, bin, full, handed := buildHook(t)

	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	os.MkdirAll(filepath.Join(src, "llama"), 0o755)
	os.WriteFile(filepath.Join(src, "llama", "model.safetensors"), []byte("weights"), 0o644)
	os.MkdirAll(mnt, 0o755)
	daemon := fusetest.Mount(t, src, mnt)

	cache, run, state := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	weights := filepath.Join(mnt, "llama")
	catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Models: []catalog.Model{{Name: "llama", Source: weights}}})
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("dir_timeout = \"1s\"\n"), 0o644)
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run, DirTimeout: time.Second}.WithDefaults()
	if err := nodeconf.WriteResolved(conf, id, "dev", cfg); err != nil {
		t.Fatal(err)
	}
	fusetest.Stop(t, daemon)

	hook := func(name string, env ...string) (string, error) {
		// Far above the 1 s bound, far below any PrologEpilogTimeout: a
		// hook still running then is one that would have drained the node.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, name, "--config", conf)
		cmd.Env = append([]string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=n1", "LLMGW_HOOK_FULL=" + full}, env...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("llmgw-hook %s still running after 30 s on a hung mount: it would drain the node", name)
		}
		return string(out), err
	}
	if out, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=llama"); err != nil {
		t.Fatalf("prolog on a hung mount: %v (a non-zero Prolog drains the node)\n%s", err, out)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("the fast path handed a hung mount to llmgw prolog, which would hang on it as well")
	}
	out, err := hook("task-prolog")
	want := "the weights at " + weights + " did not answer within 1 s (a hung mount?)"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("task-prolog: %v, %q; want it to fail the job with %q", err, out, want)
	}
}
