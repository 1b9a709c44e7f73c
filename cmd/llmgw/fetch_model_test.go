package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// `llmgw fetch MODEL` resolves a catalog name, a model of several files
// included, fetches it as a Prolog would and prints the path a job gets;
// a bare name that is no catalog entry is an error that says so. On main
// `llmgw fetch qwen-7b` printed qwen-7b and exited 0.
func TestFetchCatalogModel(t *testing.T) {
	e := newEvictEnv(t)
	ctx := context.Background()
	e.add("qwen-7b", 1)
	set := api.Model{Name: "split", Files: []catalog.File{{Source: e.src("s1", 1)}, {Source: e.src("s2", 1)}}}
	set.Source = set.Files[0].Source
	if _, err := e.admin.PutModel(ctx, set); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	env := map[string]string{"LLMGW_COORDINATOR": e.url, "LLMGW_TOKEN_FILE": writeToken(t, "admin-secret")}
	args := func(a ...string) []string {
		return append(a, "--cache-dir", cache, "--lock-dir", filepath.Join(t.TempDir(), "locks"), "--state-dir", filepath.Join(t.TempDir(), "state"))
	}

	code, out, errs := llmgwRun(t, env, args("fetch", "qwen-7b")...)
	if want := catalog.CachePathFor(cache, e.src("qwen-7b", 1)); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("llmgw fetch qwen-7b: %d %q %s; want the cached file's path %s", code, out, errs, want)
	}
	if fi, err := os.Stat(strings.TrimSpace(out)); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("the fetched file: %v", err)
	}

	code, out, errs = llmgwRun(t, env, args("fetch", "split")...)
	m, _ := catalog.Copy{Models: []catalog.Model{{Name: "split", Source: set.Source, Files: set.Files}}}.Lookup("split")
	if want := catalog.SetPath(cache, m); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("llmgw fetch split: %d %q %s; want its set path %s", code, out, errs, want)
	}
	for _, f := range set.Files {
		if _, err := os.Stat(catalog.SetFilePath(catalog.SetDir(cache, m), f.Source)); err != nil {
			t.Errorf("file %s of the set: %v", f.Source, err)
		}
	}

	code, out, errs = llmgwRun(t, env, args("fetch", "nosuch")...)
	if code == 0 || !strings.Contains(errs, "nosuch is not a catalog entry") {
		t.Errorf("llmgw fetch nosuch: %d %q %q; want an error saying it is no catalog entry", code, out, errs)
	}
	// Without a coordinator, the agent's catalog copy resolves.
	state := t.TempDir()
	if err := catalog.WriteCopy(filepath.Join(state, "catalog.json"), catalog.Copy{Coordinator: e.url, Models: []catalog.Model{{Name: "qwen-7b", Source: e.src("qwen-7b", 1)}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = llmgwRun(t, map[string]string{}, "fetch", "qwen-7b", "--cache-dir", cache, "--state-dir", state, "--lock-dir", filepath.Join(t.TempDir(), "locks"))
	if code != 0 || strings.TrimSpace(out) != catalog.CachePathFor(cache, e.src("qwen-7b", 1)) {
		t.Errorf("llmgw fetch qwen-7b from the catalog copy: %d %q %s", code, out, errs)
	}
	// An engine's org/name model id still passes through.
	if code, out, _ := llmgwRun(t, map[string]string{}, "fetch", "Qwen/Qwen2.5-7B", "--cache-dir", cache); code != 0 || strings.TrimSpace(out) != "Qwen/Qwen2.5-7B" {
		t.Errorf("llmgw fetch Qwen/Qwen2.5-7B: %d %q", code, out)
	}
}

// `llmgw fetch MODEL` of a Hub model fetches it as a node's Prolog does,
// into the Hugging Face cache (the agent's default, <cache-dir>/hub, or
// --hf-cache) in huggingface_hub's layout, and prints the path a job
// gets: its snapshot. Before, the catalog entry's source (hf:ORG/NAME@
// COMMIT) went to the fetcher of one file, which refused it as "names a
// repository, not a file".
func TestFetchHubModel(t *testing.T) {
	coord, _, adminTok := testCoordinator(t)
	h := startStandIn(t)
	commit := h.Commit("org/tiny", "main", hubShards(`{"model_type":"llama"}`))
	env := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	if code, out, errs := llmgwRun(t, env, "models", "add", "tiny", "hf:org/tiny"); code != 0 {
		t.Fatalf("models add tiny hf:org/tiny: exit %d, %q %q", code, out, errs)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	locks := filepath.Join(t.TempDir(), "locks")

	code, out, errs := llmgwRun(t, env, "fetch", "tiny", "--cache-dir", cache, "--lock-dir", locks)
	snap := catalog.HubSnapshotDir(filepath.Join(cache, "hub"), "org/tiny", commit)
	if code != 0 || strings.TrimSpace(out) != snap {
		t.Fatalf("llmgw fetch tiny: %d %q %s; want its snapshot %s", code, out, errs, snap)
	}
	for name, want := range h.Files("org/tiny", commit) {
		if name == "README.md" || strings.HasPrefix(name, "original/") {
			continue // not selected
		}
		if got, err := os.ReadFile(filepath.Join(snap, name)); err != nil || string(got) != string(want) {
			t.Errorf("%s in the snapshot: %d bytes, %v; want the commit's %d", name, len(got), err, len(want))
		}
	}
	if ref, err := os.ReadFile(catalog.HubRefPath(filepath.Join(cache, "hub"), "org/tiny", "main")); err != nil || string(ref) != commit {
		t.Errorf("refs/main: %q, %v; want %s", ref, err, commit)
	}
	// Present: nothing more is read from the Hub, and the path is the same.
	served := h.Served()
	if code, out, errs := llmgwRun(t, env, "fetch", "tiny", "--cache-dir", cache, "--lock-dir", locks); code != 0 || strings.TrimSpace(out) != snap || h.Served() != served {
		t.Errorf("llmgw fetch tiny again: %d %q %s, %d bytes more from the Hub; want the same path and none", code, out, errs, h.Served()-served)
	}
	// The agent's hf_cache elsewhere: --hf-cache.
	other := filepath.Join(t.TempDir(), "hf")
	code, out, errs = llmgwRun(t, env, "fetch", "tiny", "--cache-dir", cache, "--hf-cache", other, "--lock-dir", locks)
	if want := catalog.HubSnapshotDir(other, "org/tiny", commit); code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("llmgw fetch tiny --hf-cache %s: %d %q %s; want %s", other, code, out, errs, want)
	}
}
