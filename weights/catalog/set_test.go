package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func twoParts() Model {
	return Model{Name: "m", Files: []File{
		{Source: "hf:org/repo/qwen-7b-00001-of-00002.gguf"},
		{Source: "https://h/x/qwen-7b-00002-of-00002.gguf?sig=secret"},
	}}
}

// A set's directory is named by its sources alone, is a cache name that
// says it is a set, and is the same from the redacted catalog copy.
func TestSetName(t *testing.T) {
	m := twoParts()
	name := SetName(m)
	if !IsCacheName(name) || !IsSetName(name) || !strings.HasSuffix(name, "-qwen-7b.set") {
		t.Fatalf("SetName = %q, want a cache name ending -qwen-7b.set", name)
	}
	if IsSetName(CacheName(m.Files[0].Source)) {
		t.Errorf("a single file's cache name %q reads as a set", CacheName(m.Files[0].Source))
	}
	if red := m.MapSources(RedactQuery); SetName(red) != name || strings.Contains(red.Files[1].Source, "secret") {
		t.Errorf("redacted: %q, %+v; want %q without the signature", SetName(red), red.Files, name)
	}
	other := twoParts()
	other.Files[1].Source = "https://h/y/qwen-7b-00002-of-00002.gguf"
	if SetName(other) == name {
		t.Error("two sets from different places share a directory")
	}
	if got := SetPath("/c", m); got != filepath.Join("/c", name, "qwen-7b-00001-of-00002.gguf") {
		t.Errorf("SetPath of a split GGUF = %q, want its first part", got)
	}
	st := Model{Files: []File{{Source: "hf:o/r/model.safetensors"}, {Source: "hf:o/r/config.json"}}}
	if got := SetPath("/c", st); got != filepath.Join("/c", SetName(st)) {
		t.Errorf("SetPath of a checkpoint = %q, want the directory", got)
	}
	if w := WantedCacheNames([]Model{m}); w[name] != "m" || len(w) != 1 {
		t.Errorf("WantedCacheNames = %v, want the set directory only", w)
	}
}

func TestCheckSet(t *testing.T) {
	if err := CheckSet(twoParts()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files []File
		want  string
	}{
		{[]File{{Source: "hf:o/r/a.gguf"}}, "at least two"},
		{[]File{{Source: "hf:o/r/a.gguf"}, {Source: "/m/b.gguf"}}, "not an hf: or http(s) source"},
		{[]File{{Source: "hf:o/r/a.gguf"}, {Source: "https://h/a.gguf"}}, `both be named "a.gguf"`},
		{[]File{{Source: "hf:o/r/config.json"}, {Source: "hf:o/r/tok.json"}}, "no file is a weight file"},
		{[]File{{Source: "hf:o/r/a.gguf"}, {Source: "hf:o/r/.llmgw-set.json"}}, "hidden"},
		{[]File{{Source: "hf:o/r/a.gguf"}, {Source: "hf:o/r/b.gguf", SHA256: "x"}}, "64 hex"},
	} {
		if err := CheckSet(Model{Files: c.files}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckSet(%v) = %v, want %q", c.files, err, c.want)
		}
	}
}

// The manifest names the directory it was written into.
func TestManifest(t *testing.T) {
	cache := t.TempDir()
	m := twoParts()
	if err := WriteManifest(cache, m); err != nil {
		t.Fatal(err)
	}
	man, err := ReadManifest(SetDir(cache, m))
	if err != nil {
		t.Fatal(err)
	}
	if man.Name() != SetName(m) || len(man.Files) != 2 || man.Files[1].Name != "qwen-7b-00002-of-00002.gguf" || strings.Contains(man.Files[1].Source, "secret") {
		t.Errorf("manifest %+v (name %q), want %q, both files, no signature", man, man.Name(), SetName(m))
	}
	p := filepath.Join(SetDir(cache, m), SetManifest)
	os.WriteFile(p, []byte(`{"files":[{"source":"hf:o/r/a.gguf","name":"../a.gguf"}]}`), 0o644)
	if _, err := ReadManifest(SetDir(cache, m)); err == nil {
		t.Error("a manifest naming ../a.gguf was read")
	}
}
