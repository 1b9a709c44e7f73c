package catalog

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		source string
		want   Kind
	}{
		{"", KindInvalid},
		{"/models/llama.gguf", KindPath},
		{"./llama.gguf", KindPath},
		{"../llama.gguf", KindPath},
		{"hf:org/repo/model.gguf", KindRemote},
		{"https://example.org/m.gguf", KindRemote},
		{"http://127.0.0.1/m.gguf", KindRemote},
		// A relative path without ./ is indistinguishable from a model id
		// and goes to the engine untouched.
		{"models/qwen.gguf", KindModelID},
		{"Qwen/Qwen2.5-7B-Instruct", KindModelID},
	} {
		if got := KindOf(tc.source); got != tc.want {
			t.Errorf("KindOf(%q) = %v, want %v", tc.source, got, tc.want)
		}
	}
}

func TestCachePathFor(t *testing.T) {
	a := CachePathFor("/c", "https://a.example/x/model.gguf")
	b := CachePathFor("/c", "https://b.example/x/model.gguf")
	if a == b {
		t.Errorf("two sources with the same file name share a cache path %s", a)
	}
	if a != CachePathFor("/c", "https://a.example/x/model.gguf") {
		t.Error("CachePathFor is not deterministic; gc could never recompute it")
	}
	for _, src := range []string{
		"https://a.example/x/model.gguf", "hf:org/repo@main/sub/model.gguf",
		"https://a.example/x/model.gguf?sig=abc#frag", "https://a.example/", "hf:",
		"https://a.example/" + strings.Repeat("n", 400),
	} {
		p := CachePathFor("/c", src)
		if filepath.Dir(p) != "/c" {
			t.Errorf("CachePathFor(%q) = %s, not directly in the cache dir", src, p)
		}
		if !IsCacheName(filepath.Base(p)) {
			t.Errorf("CachePathFor(%q) = %s, which IsCacheName refuses", src, p)
		}
	}
	if got := filepath.Base(CachePathFor("/c", "https://a.example/x/model.gguf?sig=abc")); !strings.HasSuffix(got, "-model.gguf") {
		t.Errorf("cache name %s does not keep the source's file name without its query", got)
	}
}

func TestIsCacheName(t *testing.T) {
	for name, want := range map[string]bool{
		"0123456789abcdef-model.gguf":                 true,
		"0123456789abcdef-model.gguf.part":            false, // a fetch under way
		"0123456789abcdef-model.gguf.part.ranges":     false,
		"0123456789abcdef-model.gguf.part.ranges.tmp": false,
		"0123456789ABCDEF-model.gguf":                 false,
		"0123456789abcde-model.gguf":                  false,
		"0123456789abcdefmodel.gguf":                  false,
		"0123456789abcdef-":                           false,
		"0123456789abcdef-..":                         false,
		"llama-3-8b.gguf":                             false, // an operator's file
		"../0123456789abcdef-x":                       false,
	} {
		if got := IsCacheName(name); got != want {
			t.Errorf("IsCacheName(%q) = %v, want %v", name, got, want)
		}
	}
}
