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

// An origin that ignores Range and drops the connection half way through
// every answer: each resume gets the whole file again. On main the fetch
// failed saying "the remote changed since the partial download started",
// which sent the operator looking for a changed file; it says now that
// the origin ignores Range.
func TestOriginIgnoringRangeSaidAsSuch(t *testing.T) {
	body := bytes.Repeat([]byte("w"), 4<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", "4194304")
		w.WriteHeader(http.StatusOK) // whatever Range asked
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops
	}))
	t.Cleanup(srv.Close)
	f := testFetcher(t)
	f.Connections = 1
	_, err := f.Ensure(context.Background(), srv.URL+"/m.gguf", Want{})
	if err == nil || !strings.Contains(err.Error(), "the origin ignores Range requests") || strings.Contains(err.Error(), "the remote changed") {
		t.Fatalf("a fetch from an origin that ignores Range and drops every connection: %v; want it said as such", err)
	}
}

// A branch with a slash written unescaped (hf:org/repo@feature/x/m.gguf)
// reads as branch "feature" and file "x/m.gguf", and the hub answers 404;
// on main the error said only to check the names. It hints %2F now.
func TestHubSlashBranchHint(t *testing.T) {
	hub := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(hub.Close)
	f := testFetcher(t)
	f.HFEndpoint = hub.URL
	f.Retries = -1
	_, err := f.Ensure(context.Background(), "hf:org/repo@feature/x/m.gguf", Want{})
	if err == nil || !strings.Contains(err.Error(), "%2F") || !strings.Contains(err.Error(), "hf:org/repo@feature%2Fx/m.gguf") {
		t.Fatalf("a 404 for a revision followed by a path of several parts: %v; want the %%2F hint with the escaped source", err)
	}
	// A file at the top of the repository gets no such hint.
	if _, err := f.Ensure(context.Background(), "hf:org/repo@v1/m.gguf", Want{}); err == nil || strings.Contains(err.Error(), "%2F") {
		t.Errorf("a 404 for hf:org/repo@v1/m.gguf: %v; want no slash hint", err)
	}
}
