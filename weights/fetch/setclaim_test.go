package fetch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
)

// A set that cannot fit fetches nothing: the case, on a real ext4
// filesystem with 103 MB free, a model of 3 × 38 MB whose sizes the
// catalog does not give (each asked of the origin before the first byte).
// File by file, the third failed and the first two (76 MB) stayed; whole,
// the first file is refused, naming the set's size, and the set directory
// holds no byte of weights. Once room is made, the same set fetches whole.
func TestSetClaimedWhole(t *testing.T) {
	mnt := loopfs.Mount(t, 150)
	const fileMB = 38
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), bytes.NewReader(bytes.Repeat([]byte(r.URL.Path[1:2]), fileMB*1000*1000)))
	}))
	t.Cleanup(srv.Close)
	f := testFetcher(t)
	f.CacheDir = filepath.Join(mnt, "cache")
	os.MkdirAll(f.CacheDir, 0o755)
	// Ballast so that 103 MB are free.
	free, _, err := statfsFree(f.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	ballast := filepath.Join(mnt, "ballast")
	bf, _ := os.Create(ballast)
	if err := preallocate(bf, free-103_000_000); err != nil {
		t.Fatal(err)
	}
	bf.Close()
	m := catalog.Model{Name: "m", Files: []catalog.File{
		{Source: srv.URL + "/a-00001-of-00003.gguf"}, {Source: srv.URL + "/b-00002-of-00003.gguf"}, {Source: srv.URL + "/c-00003-of-00003.gguf"},
	}}
	if err := catalog.WriteManifest(f.CacheDir, m); err != nil {
		t.Fatal(err)
	}
	set, dir := catalog.SetName(m), catalog.SetDir(f.CacheDir, m)
	ctx := context.Background()
	_, err = f.EnsureIn(ctx, set, m.Files[0].Source, Want{})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "model of 3 files (114 MB in all) is claimed whole") || !strings.Contains(err.Error(), "nothing of it was fetched") {
		t.Fatalf("the first file of a set that cannot fit: %v; want a refusal that names the whole set", err)
	}
	if got := dirUsage(dir); got > 64<<10 {
		t.Errorf("the refused set's directory holds %d bytes; want none of its weights", got)
	}
	// Room made: the set fetches, each file inside the set's claim.
	os.Remove(ballast)
	for _, file := range m.Files {
		if _, err := f.EnsureIn(ctx, set, file.Source, Want{}); err != nil {
			t.Fatalf("EnsureIn %s once there is room: %v", file.Source, err)
		}
	}
	if got := dirUsage(dir); got < 3*fileMB*1000*1000 {
		t.Errorf("the set directory holds %d bytes after the set fetched; want 3 × %d MB", got, fileMB)
	}
	// Complete: the set's claim holds nothing any more.
	if c, err := f.Claimed(ctx, f.CacheDir); err != nil || c != 0 {
		t.Errorf("claims after the set is complete: %d, %v; want 0", c, err)
	}
}
