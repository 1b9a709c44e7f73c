package prolog

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestFastSet: the fast path holds a model of several files to every file
// in its set directory, reading the world-readable catalog copy (whose
// signed URLs are redacted, and still name the same directory), and the
// job is given the first part of a split GGUF, or a checkpoint's
// directory.
func TestFastSet(t *testing.T) {
	cfg := nodeConfig(t)
	gguf := catalog.Model{Name: "g", Files: []catalog.File{
		{Source: "hf:org/repo/g-00001-of-00002.gguf", Size: 5},
		{Source: "https://o.example/g-00002-of-00002.gguf?X-Amz-Signature=secret", Size: 7},
	}}
	ckpt := catalog.Model{Name: "c", Size: 8, Files: []catalog.File{
		{Source: "hf:org/repo/model.safetensors"},
		{Source: "hf:org/repo/config.json"},
	}}
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{gguf, ckpt}}); err != nil {
		t.Fatal(err)
	}
	dir := catalog.SetDir(cfg.CacheDir, gguf)
	first, second := filepath.Join(dir, "g-00001-of-00002.gguf"), filepath.Join(dir, "g-00002-of-00002.gguf")
	job := Job{ID: "21", Node: "n1", Model: "g"}
	write(t, first, 5)
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) || !strings.Contains(err.Error(), "g-00002-of-00002.gguf") {
		t.Fatalf("Fast with one part = %v; want ErrNotPresent naming the other", err)
	}
	write(t, second, 6)
	if err := Fast(cfg, job, time.Now()); !errors.Is(err, ErrNotPresent) {
		t.Fatalf("Fast with a short second part = %v; want ErrNotPresent", err)
	}
	write(t, second, 7)
	if err := Fast(cfg, job, time.Now()); err != nil {
		t.Fatalf("Fast with both parts: %v", err)
	}
	rec, err := catalog.ReadJobRecord(cfg.RunDir, "21")
	if err != nil || rec.Path != first || rec.Set != filepath.Base(dir) {
		t.Errorf("record %+v, %v; want the first part and the set", rec, err)
	}
	var out bytes.Buffer
	if err := TaskProlog(cfg.RunDir, "21", envOf(nil), &out); err != nil || out.String() != "export LLMGW_MODEL=g\nexport LLMGW_MODEL_PATH="+first+"\n" {
		t.Errorf("TaskProlog: %v, %q", err, out.String())
	}

	cdir := catalog.SetDir(cfg.CacheDir, ckpt)
	write(t, filepath.Join(cdir, "model.safetensors"), 6)
	write(t, filepath.Join(cdir, "config.json"), 1)
	if err := Fast(cfg, Job{ID: "22", Model: "c"}, time.Now()); !errors.Is(err, ErrNotPresent) {
		t.Errorf("Fast with 7 of the model's 8 bytes = %v; want ErrNotPresent", err)
	}
	write(t, filepath.Join(cdir, "config.json"), 2)
	if err := Fast(cfg, Job{ID: "22", Model: "c"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec, _ := catalog.ReadJobRecord(cfg.RunDir, "22"); rec.Path != cdir {
		t.Errorf("a checkpoint's path: %q; want its directory %s", rec.Path, cdir)
	}
}
