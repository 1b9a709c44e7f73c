package full

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Item 1's last part: a job refused for space while gc holds what it
// would reclaim (here the catalog copy is not the one the node trusts)
// says so in its reason, with the bytes and why; on main the reason said
// only "not enough disk space".
func TestNoSpaceSaysWhatGCHolds(t *testing.T) {
	mnt := loopfs.Mount(t, 40)
	body := bytes.Repeat([]byte("w"), 20<<20)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), bytes.NewReader(body))
	}))
	t.Cleanup(o.Close)
	m := catalog.Model{Name: "new", Source: o.URL + "/new.gguf", Size: int64(len(body))}
	p, _, _ := newProlog(t, m)
	p.Config.CacheDir = filepath.Join(mnt, "cache")
	p.Fetcher.CacheDir = p.Config.CacheDir
	os.MkdirAll(p.Config.CacheDir, 0o755)
	// The old model's file fills the disk; the catalog no longer wants it,
	// but the node does not trust this catalog (another identity).
	old := catalog.CachePathFor(p.Config.CacheDir, o.URL+"/old.gguf")
	if err := os.WriteFile(old, bytes.Repeat([]byte("o"), 25<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-24 * time.Hour)
	os.Chtimes(old, long, long)
	cp := catalog.Copy{Coordinator: "http://coord", Models: []catalog.Model{m}, CatalogID: "restored", Generation: 3,
		TrustedID: "original", TrustedGeneration: 9}
	if err := catalog.WriteCopy(p.Config.CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	p.Run(context.Background(), prolog.Job{ID: "5", Node: "n1", Model: "new"}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not enough disk space", "gc holds 26 MB it would reclaim on this node", "identity restored, not original"} {
		if !strings.Contains(rec.Error, want) {
			t.Errorf("the job's reason %q lacks %q", rec.Error, want)
		}
	}
}
