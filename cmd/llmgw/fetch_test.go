package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestFetchCommand(t *testing.T) {
	data := bytes.Repeat([]byte("llmgw weights "), 100000)
	sum := sha256.Sum256(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"1"`)
		http.ServeContent(w, r, "m.gguf", time.Now(), bytes.NewReader(data))
	}))
	defer srv.Close()
	src := srv.URL + "/m.gguf"
	dir := t.TempDir()
	cache, locks := filepath.Join(dir, "cache"), filepath.Join(dir, "locks")

	code, out, stderr := llmgwRun(t, nil, "fetch", src, "--cache-dir", cache, "--lock-dir", locks, "--sha256", hex.EncodeToString(sum[:]))
	want := catalog.CachePathFor(cache, src)
	if code != 0 || out != want+"\n" {
		t.Fatalf("llmgw fetch: exit %d, stdout %q, stderr %q; want 0 and %s", code, out, stderr, want)
	}
	if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetched file: %v", err)
	}
	// Not a terminal: plain progress lines, no carriage returns.
	if !strings.Contains(stderr, "fetch "+src+": ") || strings.Contains(stderr, "\r") {
		t.Errorf("stderr %q; want plain progress lines naming the source", stderr)
	}

	t.Run("cache dir from LLMGW_CACHE_DIR", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "c2")
		code, out, _ := llmgwRun(t, map[string]string{"LLMGW_CACHE_DIR": other, "LLMGW_LOCK_DIR": locks}, "fetch", src)
		if code != 0 || out != catalog.CachePathFor(other, src)+"\n" {
			t.Errorf("exit %d, stdout %q; want the path in %s", code, out, other)
		}
	})
	t.Run("model id passes through", func(t *testing.T) {
		code, out, _ := llmgwRun(t, nil, "fetch", "Qwen/Qwen2.5-7B-Instruct", "--cache-dir", cache)
		if code != 0 || out != "Qwen/Qwen2.5-7B-Instruct\n" {
			t.Errorf("exit %d, stdout %q", code, out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		code int
		say  string
	}{
		{"no source", nil, 2, "fetch needs a SOURCE"},
		{"two sources", []string{src, src}, 2, "one SOURCE"},
		{"zero connections", []string{src, "--connections", "0"}, 2, "--connections must be at least 1"},
		{"bad sha", []string{src, "--sha256", "xyz"}, 2, "is not a sha256"},
		{"empty cache dir", []string{src, "--cache-dir", ""}, 2, "--cache-dir is empty. Give the directory to fetch into, e.g. --cache-dir /var/cache/llmgw"},
		{"unknown flag", []string{src, "--conections", "2"}, 2, "unknown flag"},
		{"wrong sha", []string{srv.URL + "/other.gguf", "--cache-dir", cache, "--lock-dir", locks, "--sha256", strings.Repeat("0", 64)}, 1, "sha256 mismatch"},
		{"missing path", []string{"/no/such/model.gguf"}, 1, "not on this node"},
		{"repository", []string{"hf:org/repo", "--cache-dir", cache}, 1, "names a repository, not a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := llmgwRun(t, nil, append([]string{"fetch"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.say) || out != "" {
				t.Errorf("llmgw fetch %q: exit %d, stdout %q, stderr %q; want %d saying %q", tc.args, code, out, stderr, tc.code, tc.say)
			}
		})
	}
}
