package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestCatalogCopyKeepsSignaturesPrivate: the node's catalog copy is
// world-readable (the TaskProlog reads it as the job's user), so a signed
// URL's signature must not be in it; the whole source goes to a 0600 copy
// beside it, and the redacted source still names the file the fetcher
// wrote.
func TestCatalogCopyKeepsSignaturesPrivate(t *testing.T) {
	const src = "https://bucket.example/m.gguf?X-Amz-Signature=deadbeef&X-Amz-Expires=3600"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"models":[{"name":"m","source":"` + src + `"}]}`))
	}))
	defer ts.Close()
	dir := t.TempDir()
	cfg := Config{Coordinator: ts.URL, StateDir: filepath.Join(dir, "state")}
	if _, err := refreshCatalog(context.Background(), &api.Client{BaseURL: ts.URL}, cfg); err != nil {
		t.Fatal(err)
	}
	pub := cfg.CatalogCopyPath()
	b, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "deadbeef") {
		t.Errorf("the world-readable copy %s holds the signature:\n%s", pub, b)
	}
	priv := catalog.PrivateCopyPath(pub)
	st, err := os.Stat(priv)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("private copy %s has mode %04o, want 0600", priv, st.Mode().Perm())
	}
	full, err := catalog.ReadCopy(priv)
	if err != nil || len(full.Models) != 1 || full.Models[0].Source != src {
		t.Fatalf("private copy = %+v, %v; want the whole source", full, err)
	}
	public, err := catalog.ReadCopy(pub)
	if err != nil || len(public.Models) != 1 {
		t.Fatal(public, err)
	}
	if catalog.CachePathFor("/c", public.Models[0].Source) != catalog.CachePathFor("/c", src) {
		t.Error("the redacted source names another cache file than the one fetched from the whole source")
	}
}
