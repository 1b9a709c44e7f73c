package prolog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestFastHub: the fast path holds a Hub model present when every file of
// its list is in its commit's snapshot with its size, and refs/main names
// that commit; the job is given the snapshot, and the TaskProlog the
// Hugging Face cache, offline unless agent.toml says otherwise.
func TestFastHub(t *testing.T) {
	cfg := nodeConfig(t)
	commit := strings.Repeat("c", 40)
	h := &catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit, Files: []catalog.HubFile{
		{Path: "config.json", Size: 3, Blob: strings.Repeat("1", 40)},
		{Path: "sub/model.safetensors", Size: 7, SHA256: strings.Repeat("2", 64)}}}
	m := catalog.Model{Name: "tiny", Source: catalog.HubSource(h.Repo, commit), Hub: h}
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{m}}); err != nil {
		t.Fatal(err)
	}
	hf := cfg.HFCacheDir()
	job := Job{ID: "21", Node: "n1", Model: "tiny"}
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) {
		t.Fatalf("Fast before the fetch = %v, want ErrNotPresent", err)
	}
	fillHub(t, hf, h, strings.Repeat("d", 40))
	ref := catalog.HubRefPath(hf, h.Repo, "main")
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) || !strings.Contains(err.Error(), "does not name commit") {
		t.Fatalf("Fast with refs/main at another commit = %v, want ErrNotPresent naming the ref", err)
	}
	os.WriteFile(ref, []byte(commit), 0o644)
	if err := Fast(cfg, job, time.Now()); err != nil {
		t.Fatalf("Fast with the snapshot whole: %v", err)
	}
	var out bytes.Buffer
	if err := TaskProlog(cfg.RunDir, "21", envOf(nil), &out); err != nil {
		t.Fatal(err)
	}
	snap := catalog.HubSnapshotDir(hf, h.Repo, commit)
	want := "export LLMGW_MODEL=tiny\nexport LLMGW_MODEL_PATH=" + snap + "\nexport HF_HUB_CACHE=" + hf + "\nexport HF_HUB_OFFLINE=1\n"
	if out.String() != want {
		t.Errorf("TaskProlog printed %q, want %q", out.String(), want)
	}
	// A file of another size: the slow path fetches.
	os.WriteFile(catalog.HubBlobPath(hf, h.Repo, h.Files[0].BlobName()), []byte("xx"), 0o644)
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("Fast with a short config.json = %v", err)
	}

	// hf_hub_offline = false: the cache, not the offline switch.
	online := false
	cfg.HFHubOffline = &online
	os.WriteFile(catalog.HubBlobPath(hf, h.Repo, h.Files[0].BlobName()), []byte("xxx"), 0o644)
	if err := Fast(cfg, Job{ID: "22", Model: "tiny"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	TaskProlog(cfg.RunDir, "22", envOf(nil), &out)
	if !strings.Contains(out.String(), "HF_HUB_CACHE="+hf+"\n") || strings.Contains(out.String(), "HF_HUB_OFFLINE") {
		t.Errorf("TaskProlog with hf_hub_offline = false printed %q", out.String())
	}
	// A cache path that would break slurmstepd's line protocol is refused.
	catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: "23", Model: "m", Path: "/p", HFCache: "/a\nexport EVIL=1"})
	out.Reset()
	if err := TaskProlog(cfg.RunDir, "23", envOf(nil), &out); !errors.Is(err, ErrJobFails) || strings.Contains(out.String(), "\nexport") {
		t.Errorf("TaskProlog with a newline in the cache = %v, %q", err, out.String())
	}
}

// TestFastHubInWeightDir: a Hub model's snapshot that a weight directory
// holds, in a Hugging Face cache of its own (a site's shared cache on a
// filer, listed in weight_dirs: the directory, or its hub/ as $HF_HOME
// lays it out), is the model on this node, as the scan says it is: the job
// is given that snapshot and that cache, and nothing is fetched. The
// fast path checked hf_cache alone, and a node placement preferred for the
// snapshot fetched the whole model again into hf_cache. A snapshot there
// whose refs/main names another commit is not the model: llmgw does not
// write a weight directory, and an engine given the id would load the
// other commit.
func TestFastHubInWeightDir(t *testing.T) {
	commit := strings.Repeat("c", 40)
	h := &catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit, Files: []catalog.HubFile{
		{Path: "config.json", Size: 3, Blob: strings.Repeat("1", 40)},
		{Path: "model.safetensors", Size: 7, SHA256: strings.Repeat("2", 64)}}}
	m := catalog.Model{Name: "tiny", Source: catalog.HubSource(h.Repo, commit), Hub: h}
	for i, layout := range []string{"", "hub"} {
		cfg := nodeConfig(t)
		if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{m}}); err != nil {
			t.Fatal(err)
		}
		other, shared := t.TempDir(), t.TempDir()
		cfg.WeightDirs = []string{other, shared}
		hf := filepath.Join(shared, layout)
		fillHub(t, hf, h, commit)
		job := Job{ID: fmt.Sprint(30 + i), Node: "n1", Model: "tiny"}
		if err := Fast(cfg, job, time.Now()); err != nil {
			t.Fatalf("%q: Fast with the snapshot in a weight directory's cache: %v", layout, err)
		}
		var out bytes.Buffer
		if err := TaskProlog(cfg.RunDir, job.ID, envOf(nil), &out); err != nil {
			t.Fatal(err)
		}
		want := "export LLMGW_MODEL=tiny\nexport LLMGW_MODEL_PATH=" + catalog.HubSnapshotDir(hf, h.Repo, commit) + "\nexport HF_HUB_CACHE=" + hf + "\nexport HF_HUB_OFFLINE=1\n"
		if out.String() != want {
			t.Errorf("%q: TaskProlog printed %q, want %q", layout, out.String(), want)
		}
		os.WriteFile(catalog.HubRefPath(hf, h.Repo, "main"), []byte(strings.Repeat("d", 40)), 0o644)
		if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) {
			t.Errorf("%q: Fast with the weight directory's refs/main at another commit = %v, want ErrNotPresent", layout, err)
		}
	}
}

// fillHub lays out h's snapshot in the Hugging Face cache hf, as a fetch
// leaves it, with refs/main holding ref.
func fillHub(t *testing.T, hf string, h *catalog.Hub, ref string) {
	t.Helper()
	for _, f := range h.Files {
		write(t, catalog.HubBlobPath(hf, h.Repo, f.BlobName()), int(f.Size))
		link := catalog.HubFilePath(hf, h.Repo, h.Commit, f.Path)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(catalog.HubLinkTarget(f.Path, f.BlobName()), link); err != nil {
			t.Fatal(err)
		}
	}
	p := catalog.HubRefPath(hf, h.Repo, "main")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(ref), 0o644); err != nil {
		t.Fatal(err)
	}
}
