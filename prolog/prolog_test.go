package prolog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestJobFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		model   string
		wantErr string
	}{
		{env: map[string]string{"SLURM_JOB_ID": "7"}},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SPANK_LLMGW_MODEL": "llama"}, model: "llama"},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_COMMENT": "my run llmgw:model=qwen"}, model: "qwen"},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_COMMENT": "llmgw:model=a,llmgw:model=b"}, model: "b"},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SPANK_LLMGW_MODEL": "x", "SLURM_JOB_COMMENT": "llmgw:model=y"}, model: "x"},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_COMMENT": "llmgw-model=old"}},
		{env: map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_COMMENT": "llmgw:model=a|b"}, model: "a|b", wantErr: "may contain only"},
		{env: map[string]string{"SLURM_JOB_ID": "../x", "SPANK_LLMGW_MODEL": "m"}, model: "m", wantErr: "SLURM_JOB_ID"},
	} {
		j, err := JobFromEnv(envOf(tc.env))
		if j.Model != tc.model || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("JobFromEnv(%v) = %+v, %v; want model %q, error %q", tc.env, j, err, tc.model, tc.wantErr)
		}
	}
}

func write(t *testing.T, p string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.Repeat([]byte{1}, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPresent(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	remote := "https://origin.example/m/model.gguf"
	write(t, catalog.CachePathFor(cache, remote), 10)
	write(t, filepath.Join(dir, "file.gguf"), 10)
	write(t, filepath.Join(dir, "model", "model.safetensors"), 10)
	write(t, filepath.Join(dir, "empty", "README.md"), 1)
	write(t, filepath.Join(dir, "copying", "a.safetensors"), 1)
	write(t, filepath.Join(dir, "copying", "b.safetensors.part"), 1)

	for _, tc := range []struct {
		m    catalog.Model
		want string // path, or "" when not present
	}{
		{catalog.Model{Source: "Qwen/Qwen2.5-7B"}, "Qwen/Qwen2.5-7B"},
		{catalog.Model{Source: remote}, catalog.CachePathFor(cache, remote)},
		{catalog.Model{Source: remote, Size: 10}, catalog.CachePathFor(cache, remote)},
		{catalog.Model{Source: remote, Size: 11}, ""},
		{catalog.Model{Source: "https://origin.example/other.gguf"}, ""},
		{catalog.Model{Source: filepath.Join(dir, "file.gguf"), Size: 10}, filepath.Join(dir, "file.gguf")},
		{catalog.Model{Source: filepath.Join(dir, "file.gguf"), Size: 9}, ""},
		{catalog.Model{Source: filepath.Join(dir, "model")}, filepath.Join(dir, "model")},
		{catalog.Model{Source: filepath.Join(dir, "empty")}, ""},
		{catalog.Model{Source: filepath.Join(dir, "copying")}, ""},
		{catalog.Model{Source: filepath.Join(dir, "absent")}, ""},
	} {
		got, err := Present(cache, filepath.Join(cache, "hub"), tc.m)
		if tc.want == "" {
			if !errors.Is(err, ErrNotPresent) {
				t.Errorf("Present(%+v) = %q, %v; want ErrNotPresent", tc.m, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Present(%+v) = %q, %v; want %q", tc.m, got, err, tc.want)
		}
	}
}

func nodeConfig(t *testing.T) nodeconf.Agent {
	dir := t.TempDir()
	return nodeconf.Agent{CacheDir: filepath.Join(dir, "cache"), StateDir: filepath.Join(dir, "state"), RunDir: filepath.Join(dir, "run")}.WithDefaults()
}

func TestFastAndTaskProlog(t *testing.T) {
	cfg := nodeConfig(t)
	src := "hf:org/repo/w.gguf"
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{{Name: "m", Source: src, Size: 5}}}); err != nil {
		t.Fatal(err)
	}
	job := Job{ID: "12", Node: "n1", Model: "m"}
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) {
		t.Fatalf("Fast before the fetch = %v, want ErrNotPresent", err)
	}
	if err := Fast(cfg, Job{ID: "12", Model: "unknown"}, time.Now()); err == nil || !strings.Contains(err.Error(), "not in the catalog copy") {
		t.Fatalf("Fast for an unknown model = %v", err)
	}
	write(t, catalog.CachePathFor(cfg.CacheDir, src), 5)
	if err := Fast(cfg, job, time.Now()); err != nil {
		t.Fatalf("Fast with the weights present: %v", err)
	}

	var out bytes.Buffer
	if err := TaskProlog(cfg.RunDir, "12", envOf(nil), &out); err != nil {
		t.Fatal(err)
	}
	want := "export LLMGW_MODEL=m\nexport LLMGW_MODEL_PATH=" + catalog.CachePathFor(cfg.CacheDir, src) + "\n"
	if out.String() != want {
		t.Errorf("TaskProlog printed %q, want %q", out.String(), want)
	}

	// A recorded failure is printed for the job and fails it.
	if err := catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: "13", Model: "m", Error: "weights for model m (source X) could not be had on n1: 404\nNot Found"}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err := TaskProlog(cfg.RunDir, "13", envOf(nil), &out)
	if !errors.Is(err, ErrJobFails) || out.String() != "print llmgw: weights for model m (source X) could not be had on n1: 404 Not Found\n" {
		t.Errorf("TaskProlog on a failure = %v, printed %q", err, out.String())
	}

	// No record: nothing to say, unless the job's environment names a model.
	out.Reset()
	if err := TaskProlog(cfg.RunDir, "14", envOf(nil), &out); err != nil || out.Len() != 0 {
		t.Errorf("TaskProlog without a record = %v, %q; want nothing", err, out.String())
	}
	if err := TaskProlog(cfg.RunDir, "14", envOf(map[string]string{"LLMGW_MODEL": "m"}), &out); !errors.Is(err, ErrJobFails) || !strings.Contains(out.String(), "left no record") {
		t.Errorf("TaskProlog without a record for a job with LLMGW_MODEL = %v, %q", err, out.String())
	}

	// A path that would break slurmstepd's line protocol is refused.
	catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: "15", Model: "m", Path: "/a\nexport EVIL=1"})
	out.Reset()
	if err := TaskProlog(cfg.RunDir, "15", envOf(nil), &out); !errors.Is(err, ErrJobFails) || strings.Contains(out.String(), "\nexport") {
		t.Errorf("TaskProlog with a newline in the path = %v, %q", err, out.String())
	}

	if err := ClearRecord(cfg.RunDir, "12"); err != nil {
		t.Fatal(err)
	}
	if err := ClearRecord(cfg.RunDir, "12"); err != nil {
		t.Errorf("clearing a record twice: %v", err)
	}
	if _, err := catalog.ReadJobRecord(cfg.RunDir, "12"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after ClearRecord: %v", err)
	}
}

func TestClaimGC(t *testing.T) {
	run := t.TempDir()
	t0 := time.Now()
	if !GCDue(run, time.Minute, t0) {
		t.Fatal("GCDue with no stamp = false")
	}
	release, ok, err := ClaimGC(run, time.Minute, t0)
	if err != nil || !ok {
		t.Fatalf("first claim = %v, %v", ok, err)
	}
	// While one Epilog collects, another does not, whatever the stamp says.
	if _, ok, err := ClaimGC(run, 0, t0.Add(time.Hour)); ok || err != nil {
		t.Errorf("claim while held = %v, %v; want false", ok, err)
	}
	release()
	if GCDue(run, time.Minute, t0.Add(30*time.Second)) {
		t.Error("GCDue within the interval = true")
	}
	if _, ok, _ := ClaimGC(run, time.Minute, t0.Add(30*time.Second)); ok {
		t.Error("claim within the interval succeeded")
	}
	if !GCDue(run, time.Minute, t0.Add(2*time.Minute)) {
		t.Error("GCDue after the interval = false")
	}
	release, ok, err = ClaimGC(run, time.Minute, t0.Add(2*time.Minute))
	if !ok || err != nil {
		t.Fatalf("claim after the interval = %v, %v", ok, err)
	}
	release()
}

// TestPresentPinnedNeedsItsTag: pins hold on every path (issue 24): a
// cache file of the pinned size that carries no recorded digest, on a
// filesystem that keeps them, is something nobody vouches for (copied in
// by hand), and the fast path leaves it to the slow path, which hashes it
// once and tags it; from then on the fast path takes it, for its pin only.
func TestPresentPinnedNeedsItsTag(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	remote := "https://origin.example/m/model.gguf"
	p := catalog.CachePathFor(cache, remote)
	write(t, p, 10)
	if !catalog.Untagged(p) {
		t.Skip("the test directory's filesystem keeps no user xattrs")
	}
	h := sha256.Sum256(bytes.Repeat([]byte{1}, 10))
	sum := hex.EncodeToString(h[:])
	other := strings.Repeat("ab", 32)
	pinned := catalog.Model{Source: remote, Size: 10, Pinned: sum}
	if got, err := Present(cache, filepath.Join(cache, "hub"), pinned); !errors.Is(err, ErrNotPresent) {
		t.Errorf("an untagged file of the pinned size: Present = %q, %v; want ErrNotPresent", got, err)
	}
	if got, err := fetch.Digest(context.Background(), p); err != nil || got != sum {
		t.Fatalf("hashing it as the slow path does: %q, %v", got, err)
	}
	if got, err := Present(cache, filepath.Join(cache, "hub"), pinned); err != nil || got != p {
		t.Errorf("the file tagged with its pin: Present = %q, %v; want %s", got, err, p)
	}
	if got, err := Present(cache, filepath.Join(cache, "hub"), catalog.Model{Source: remote, Size: 10, Pinned: other}); !errors.Is(err, ErrNotPresent) {
		t.Errorf("the file pinned to other bytes: Present = %q, %v; want ErrNotPresent", got, err)
	}
	// Unpinned, a file is taken as it is.
	if got, err := Present(cache, filepath.Join(cache, "hub"), catalog.Model{Source: remote, Size: 10}); err != nil || got != p {
		t.Errorf("unpinned: Present = %q, %v", got, err)
	}
}
