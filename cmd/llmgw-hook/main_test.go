package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestHookBinary runs the built hook as slurmd would: the fast path
// settles a job whose weights are present without handing off; a job whose
// weights are missing is handed to the full binary with the same hook and
// arguments; a job naming no model is done at once.
func TestHookBinary(t *testing.T) {
	dir, bin, full, handed := buildHook(t)

	cache, run, state := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	present, missing := "https://o.example/a.gguf", "https://o.example/b.gguf"
	catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Models: []catalog.Model{{Name: "a", Source: present}, {Name: "b", Source: missing}}})
	os.MkdirAll(cache, 0o755)
	os.WriteFile(catalog.CachePathFor(cache, present), []byte("w"), 0o644)
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("cache_dir = \""+cache+"\"\nstate_dir = \""+state+"\"\nrun_dir = \""+run+"\"\n"), 0o644)
	args := []string{"--config", conf}

	hook := func(name string, env ...string) (string, error) {
		os.Remove(handed)
		cmd := exec.Command(bin, append([]string{name}, args...)...)
		// slurmd gives the hooks no PATH: nothing may need one.
		cmd.Env = append([]string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=n1", "LLMGW_HOOK_FULL=" + full}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Without the resolved copy of agent.toml the hook does not parse it:
	// llmgw does (and leaves the copy, as the resolved config below).
	if _, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(handed); strings.TrimSpace(string(got)) != "prolog --config "+conf {
		t.Fatalf("without a resolved copy: handed %q, want the job handed to llmgw prolog", got)
	}
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run}.WithDefaults()
	if err := nodeconf.WriteResolved(conf, id, "dev", cfg); err != nil {
		t.Fatal(err)
	}

	if out, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=a"); err != nil || out != "" {
		t.Fatalf("fast path: %v, output %q", err, out)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("the fast path handed off")
	}
	if rec, err := catalog.ReadJobRecord(run, "9"); err != nil || rec.Path != catalog.CachePathFor(cache, present) {
		t.Errorf("record after the fast path: %+v, %v", rec, err)
	}
	out, err := hook("task-prolog")
	if want := "export LLMGW_MODEL=a\nexport LLMGW_MODEL_PATH=" + catalog.CachePathFor(cache, present) + "\n"; err != nil || out != want {
		t.Errorf("task-prolog: %v, %q; want %q", err, out, want)
	}
	// A later step's TaskProlog sees what the first one exported, and the
	// SPANK plugin sets LLMGW_MODEL: neither is a setting, so the fast path
	// answers.
	out, err = hook("task-prolog", "LLMGW_MODEL=a", "LLMGW_MODEL_PATH=/x")
	if want := "export LLMGW_MODEL=a\nexport LLMGW_MODEL_PATH=" + catalog.CachePathFor(cache, present) + "\n"; err != nil || out != want {
		t.Errorf("task-prolog in a step: %v, %q; want %q", err, out, want)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("LLMGW_MODEL in the job's environment handed the TaskProlog off")
	}

	out, err = hook("prolog", "SPANK_LLMGW_MODEL=b")
	got, _ := os.ReadFile(handed)
	if err != nil || strings.TrimSpace(string(got)) != "prolog "+strings.Join(args, " ") || !strings.Contains(out, "handing the job to llmgw prolog") {
		t.Errorf("missing weights: %v, output %q, handed %q; want the job handed to llmgw prolog with the same arguments", err, out, got)
	}

	if out, err := hook("prolog"); err != nil || out != "" {
		t.Errorf("no model: %v, %q", err, out)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("a job without a model was handed off")
	}

	// Flags, or an edit of agent.toml, send the job to llmgw.
	if _, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=a", "LLMGW_CACHE_DIR=/elsewhere"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handed); err != nil {
		t.Error("an LLMGW_* setting in the environment did not send the job to llmgw")
	}
	os.WriteFile(conf, []byte("cache_dir = \"/elsewhere\"\n"), 0o644)
	if _, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handed); err != nil {
		t.Error("after agent.toml changed, the stale resolved copy was used")
	}
	os.WriteFile(conf, []byte("cache_dir = \""+cache+"\"\nstate_dir = \""+state+"\"\nrun_dir = \""+run+"\"\n"), 0o644)
	id, _ = nodeconf.StatFile(conf)
	nodeconf.WriteResolved(conf, id, "dev", cfg)

	// The Epilog hands off only when gc is due: once, then not again within
	// the interval once llmgw epilog has claimed it.
	if _, err := hook("epilog"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handed); err != nil {
		t.Error("the first Epilog did not hand off for gc")
	}
	if _, err := catalog.ReadJobRecord(run, "9"); !os.IsNotExist(err) {
		t.Errorf("record after the Epilog: %v", err)
	}
	os.WriteFile(filepath.Join(run, "gc.stamp"), []byte("x\n"), 0o644)
	if _, err := hook("epilog"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("an Epilog within the gc interval handed off")
	}
}

// buildHook builds the hook into a temporary directory, beside a stand-in
// for the full llmgw that records the arguments it was handed in handed.
func buildHook(t *testing.T) (dir, bin, full, handed string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "llmgw-hook")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	full = filepath.Join(dir, "llmgw")
	handed = filepath.Join(dir, "handed")
	os.WriteFile(full, []byte("#!/bin/sh\necho \"$@\" >"+handed+"\n"), 0o755)
	return dir, bin, full, handed
}
