package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestDigestRecordsWhatItComputes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.gguf")
	body := []byte("some weights")
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(body)
	got, err := Digest(context.Background(), p)
	if err != nil || got != hex.EncodeToString(want[:]) {
		t.Fatalf("Digest = %s, %v; want %x", got, err, want)
	}
	if runtime.GOOS != "linux" {
		return
	}
	if rec, tagged := catalog.RecordedSHA256(p); !tagged || rec != got || recordedSum(p) != got {
		t.Errorf("the hooks read %q (tagged %v), the fetcher %q, where Digest computed %s", rec, tagged, recordedSum(p), got)
	}
	// A file written after it was hashed is vouched for by neither.
	if err := os.WriteFile(p, []byte("other weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rec, tagged := catalog.RecordedSHA256(p); !tagged || rec != "" || recordedSum(p) != "" {
		t.Errorf("after a write the hooks read %q (tagged %v), the fetcher %q; want no digest", rec, tagged, recordedSum(p))
	}
}

// A fetch without an expected digest still hashes behind the download and
// tags the file, so the digest its caller reports for pinning costs no
// second pass over a file of a hundred gigabytes (at 600 MB/s here, minutes
// of the Prolog's fetch deadline).
func TestAFetchWithoutDigestTagsTheFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("digest tags are user xattrs")
	}
	body := bytes.Repeat([]byte("weights "), 64<<10)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "w.gguf", time.Time{}, bytes.NewReader(body))
	}))
	defer o.Close()
	want := sha256.Sum256(body)
	for _, tc := range []struct {
		name string
		f    *Fetcher
	}{
		{"stream", &Fetcher{Connections: 1}},
		{"parallel", &Fetcher{Connections: 4, ParallelMin: 1, ChunkSize: 64 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.CacheDir, f.LockDir = t.TempDir(), t.TempDir()
			p, err := f.Ensure(context.Background(), o.URL+"/w.gguf", Want{})
			if err != nil {
				t.Fatal(err)
			}
			before := hashes.Load()
			got, err := Digest(context.Background(), p)
			if err != nil || got != hex.EncodeToString(want[:]) {
				t.Fatalf("Digest = %s, %v; want %x", got, err, want)
			}
			if n := hashes.Load() - before; n != 0 {
				t.Errorf("Digest hashed the file again (%d passes); want the fetch's tag", n)
			}
		})
	}
}
