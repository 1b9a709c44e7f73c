package catalog

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckAbsPath(t *testing.T) {
	for p, want := range map[string]string{
		"/var/cache/llmgw":              "",
		"/":                             "",
		"":                              "cache dir is empty",
		"cache":                         `cache dir "cache" is relative, not absolute`,
		"./cache":                       "is relative",
		"/a\x00b":                       "contains NUL",
		"/a\xffb":                       "is not UTF-8",
		"/" + strings.Repeat("a", 4096): "the limit is 4096",
	} {
		err := CheckAbsPath("cache dir", p)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckAbsPath(%q) = %v, want nil", p, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckAbsPath(%q) = %v, want an error saying %q", p, err, want)
		}
	}
}

// TestCleanPath holds CleanPath to filepath.Clean, on the spellings that
// make a path unclean at its start, middle and end.
func TestCleanPath(t *testing.T) {
	for _, p := range []string{
		"", "/", "//", "///", ".", "..", "a", "a/b", "./a", "../a",
		"/a", "/a/", "/a//b", "//a", "/./a", "/../a", "/a/.", "/a/..", "/a/./b", "/a/../b",
		"/a/b/c.gguf", "/a/.b/..c/...", "/a/b.", "/a/..b", "/.a", "/..a", "/...",
		"/var/cache/llmgw/hf%3Aorg%2Frepo", "/a/b/", "/a\\b", "/ä/b",
	} {
		if got, want := CleanPath(p), filepath.Clean(p); got != want {
			t.Errorf("CleanPath(%q) = %q, filepath.Clean gives %q", p, got, want)
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, p := range []string{"/", "/a/b", "/a//b", "/a/./b", "/a/../b", "/a/", "a/b", "/..."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := CleanPath(p), filepath.Clean(p); got != want {
			t.Errorf("CleanPath(%q) = %q, filepath.Clean gives %q", p, got, want)
		}
	})
}

func BenchmarkCleanPath(b *testing.B) {
	const p = "/var/cache/llmgw/hf/org3/repo-017/model-017-q4_k_m.gguf"
	b.Run("filepath.Clean", func(b *testing.B) {
		for b.Loop() {
			_ = filepath.Clean(p)
		}
	})
	b.Run("CleanPath", func(b *testing.B) {
		for b.Loop() {
			_ = CleanPath(p)
		}
	})
}
