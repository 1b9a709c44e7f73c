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
	os.WriteFile(conf, []byte("hook_fs_timeout = \"1s\"\n"), 0o644)
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run, HookFSTimeout: time.Second}.WithDefaults()
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
	want := "no answer to a stat of " + weights + " within hook_fs_timeout (1 s; 0 earlier operations answered): the filesystem is not answering (a hung mount?)"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("task-prolog: %v, %q; want it to fail the job with %q", err, out, want)
	}
}

// TestHookSlowMount is item 5: a filer that answers every operation, but
// each about 1.5 s late, is slow, not hung. On main the hooks bounded the
// whole look at a model by one number (dir_timeout, here 2 s), and a
// directory model (a stat and a listing, 3 s) failed its job "did not
// answer within 2 s (a hung mount?)". Now each operation is bounded by
// hook_fs_timeout (here 3 s) and the look by the Prolog's fetch_deadline:
// the job gets its weights.
func TestHookSlowMount(t *testing.T) {
	fusetest.Need(t)
	dir, bin, full, handed := buildHook(t)
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	os.MkdirAll(filepath.Join(src, "llama"), 0o755)
	os.WriteFile(filepath.Join(src, "llama", "model.safetensors"), []byte("weights"), 0o644)
	os.MkdirAll(mnt, 0o755)
	daemon := fusetest.Mount(t, src, mnt, fusetest.Uncached...)

	cache, run, state := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	weights := filepath.Join(mnt, "llama")
	catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Models: []catalog.Model{{Name: "llama", Source: weights}}})
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("dir_timeout = \"2s\"\nhook_fs_timeout = \"3s\"\n"), 0o644)
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run, DirTimeout: 2 * time.Second, HookFSTimeout: 3 * time.Second}.WithDefaults()
	if err := nodeconf.WriteResolved(conf, id, "dev", cfg); err != nil {
		t.Fatal(err)
	}
	fusetest.Slow(t, daemon, 1500*time.Millisecond)

	run1 := func(name string, env ...string) (string, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, name, "--config", conf)
		cmd.Env = append([]string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=n1", "LLMGW_HOOK_FULL=" + full}, env...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		return string(out), time.Since(start), err
	}
	out, took, err := run1("prolog", "SLURM_JOB_COMMENT=llmgw:model=llama")
	if err != nil {
		t.Fatalf("prolog on a slow mount: %v\n%s", err, out)
	}
	t.Logf("the Prolog's fast path took %s on a filer answering each operation 1.5 s late", took.Round(time.Millisecond))
	if took < 2*time.Second {
		t.Logf("the look took under dir_timeout (%s): the filer was not slow enough to tell the rules apart", took)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("the fast path handed a slow mount to llmgw prolog")
	}
	out, _, err = run1("task-prolog")
	if err != nil || !strings.Contains(out, "export LLMGW_MODEL_PATH="+weights) {
		t.Errorf("task-prolog after a slow look: %v, %q; want the job given its weights", err, out)
	}
}

// TestHookHungHubCache is hook_fs_timeout for a Hub model: its snapshot's
// files and refs in a Hugging Face cache on a filer that stopped answering.
// The Hub fast path's stats were outside the per-operation watch, so the
// hooks waited for the whole look's budget (the Prolog's fetch_deadline,
// an hour by default) and slurmd would have drained the node; each of
// them is one watched operation now, and the job's message names it.
func TestHookHungHubCache(t *testing.T) {
	fusetest.Need(t)
	dir, bin, full, handed := buildHook(t)

	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	h := tinyHubSnapshot(src)
	commit := h.Commit
	os.MkdirAll(mnt, 0o755)
	daemon := fusetest.Mount(t, src, mnt)

	cache, run, state := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Models: []catalog.Model{{Name: "tiny", Source: catalog.HubSource(h.Repo, commit), Size: 2, Hub: &h}}})
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("hook_fs_timeout = \"1s\"\nhf_cache = \""+mnt+"\"\n"), 0o644)
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run, HookFSTimeout: time.Second, HFCache: mnt}.WithDefaults()
	if err := nodeconf.WriteResolved(conf, id, "dev", cfg); err != nil {
		t.Fatal(err)
	}
	fusetest.Stop(t, daemon)

	hook := func(name string, env ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, name, "--config", conf)
		cmd.Env = append([]string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=n1", "LLMGW_HOOK_FULL=" + full}, env...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("llmgw-hook %s still running after 30 s on a hung Hugging Face cache: it would drain the node", name)
		}
		return string(out), err
	}
	if out, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=tiny"); err != nil {
		t.Fatalf("prolog on a hung Hugging Face cache: %v (a non-zero Prolog drains the node)\n%s", err, out)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("the fast path handed a hung Hugging Face cache to llmgw prolog, which would hang on it as well")
	}
	out, err := hook("task-prolog")
	want := "no answer to a stat of " + catalog.HubFilePath(mnt, h.Repo, commit, "config.json") + " within hook_fs_timeout (1 s; 0 earlier operations answered)"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("task-prolog: %v, %q; want it to fail the job with %q", err, out, want)
	}
}

// tinyHubSnapshot writes a Hub model of one file, its snapshot at its
// commit and refs/main naming it, into the Hugging Face cache hf.
func tinyHubSnapshot(hf string) catalog.Hub {
	commit := strings.Repeat("c", 40)
	h := catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit,
		Files: []catalog.HubFile{{Path: "config.json", Size: 2, Blob: strings.Repeat("b", 40)}}}
	blob := catalog.HubBlobPath(hf, h.Repo, h.Files[0].BlobName())
	link := catalog.HubFilePath(hf, h.Repo, commit, "config.json")
	for _, d := range []string{filepath.Dir(blob), filepath.Dir(link), filepath.Dir(catalog.HubRefPath(hf, h.Repo, "main"))} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(blob, []byte("{}"), 0o644)
	os.Symlink(catalog.HubLinkTarget("config.json", h.Files[0].BlobName()), link)
	os.WriteFile(catalog.HubRefPath(hf, h.Repo, "main"), []byte(commit), 0o644)
	return h
}

// TestHookHungWeightDirHubCache is hook_fs_timeout for a Hub model the
// node holds in a weight directory's Hugging Face cache (a site's shared
// cache on a filer, listed in weight_dirs), not in its own hf_cache, when
// that filer stops answering. The weight directories' caches were looked
// at one after the other, each look bounded on its own: the hung one was
// given up on, then the next cache on the same mount (its hub/) hung as
// well, and the hooks answered that the model was not present at all, so
// the fast path handed the job to llmgw prolog, which hung twice more on
// the same filer before fetching the model from the Hub into hf_cache.
// One look now covers every cache, each operation watched: the job fails
// within hook_fs_timeout naming the stat that did not answer, and nothing
// is handed on.
func TestHookHungWeightDirHubCache(t *testing.T) {
	fusetest.Need(t)
	dir, bin, full, handed := buildHook(t)
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	h := tinyHubSnapshot(src)
	os.MkdirAll(mnt, 0o755)
	daemon := fusetest.Mount(t, src, mnt)

	cache, run, state, hf := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state"), filepath.Join(dir, "hf")
	os.MkdirAll(hf, 0o755)
	catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Models: []catalog.Model{{Name: "tiny", Source: catalog.HubSource(h.Repo, h.Commit), Size: 2, Hub: &h}}})
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("hook_fs_timeout = \"1s\"\nhf_cache = \""+hf+"\"\nweight_dirs = [\""+mnt+"\"]\n"), 0o644)
	id, err := nodeconf.StatFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodeconf.Agent{CacheDir: cache, StateDir: state, RunDir: run, HookFSTimeout: time.Second, HFCache: hf, WeightDirs: []string{mnt}}.WithDefaults()
	if err := nodeconf.WriteResolved(conf, id, "dev", cfg); err != nil {
		t.Fatal(err)
	}
	fusetest.Stop(t, daemon)

	hook := func(name string, env ...string) (string, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, name, "--config", conf)
		cmd.Env = append([]string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=n1", "LLMGW_HOOK_FULL=" + full}, env...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("llmgw-hook %s still running after 30 s on a hung weight directory: it would drain the node", name)
		}
		return string(out), time.Since(start), err
	}
	out, took, err := hook("prolog", "SLURM_JOB_COMMENT=llmgw:model=tiny")
	if err != nil {
		t.Fatalf("prolog on a hung weight directory: %v (a non-zero Prolog drains the node)\n%s", err, out)
	}
	if _, err := os.Stat(handed); err == nil {
		t.Error("the fast path handed a job whose weights are on a hung filer to llmgw prolog, which would hang on it as well, then fetch the model again")
	}
	if took > 10*time.Second {
		t.Errorf("the Prolog took %s on a filer that stopped answering, hook_fs_timeout 1 s: one bound per cache, not one look", took.Round(time.Millisecond))
	}
	out, _, err = hook("task-prolog")
	want := "no answer to a stat of " + catalog.HubFilePath(mnt, h.Repo, h.Commit, "config.json") + " within hook_fs_timeout (1 s; "
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("task-prolog: %v, %q; want it to fail the job with %q", err, out, want)
	}
}
