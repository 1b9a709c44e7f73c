package fetch

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFetchRecordsOriginValidator: a fetch notes on the file how the origin
// named the version it served (the ETag; the hub's X-Repo-Commit and
// X-Linked-Etag; else Last-Modified), for the Prolog to send with its pin,
// and the note is dropped once the file is no longer what was fetched.
func TestFetchRecordsOriginValidator(t *testing.T) {
	t.Run("ETag", func(t *testing.T) {
		o := newFakeOrigin(t, 200<<10)
		o.setData(o.data, `"abc-123"`)
		f := testFetcher(t)
		p := mustEnsure(t, f, o.url(), Want{})
		if got := RecordedOrigin(p); got != `ETag: "abc-123"` {
			t.Fatalf("RecordedOrigin = %q, want %q", got, `ETag: "abc-123"`)
		}
		// A file changed since its fetch vouches for nothing.
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		fh.Write([]byte("x"))
		fh.Close()
		if got := RecordedOrigin(p); got != "" {
			t.Errorf("RecordedOrigin of a file written after its fetch = %q, want none", got)
		}
	})
	t.Run("hub commit and linked etag", func(t *testing.T) {
		o := newFakeOrigin(t, 200<<10)
		commit := strings.Repeat("c0ffee", 6) + "abcd"
		o.hub, o.linkedEtag, o.repoCommit = true, sha256Hex(o.data), commit
		f := testFetcher(t)
		f.HFEndpoint = o.srv.URL
		p := mustEnsure(t, f, "hf:org/repo/model.gguf", Want{})
		want := "X-Repo-Commit: " + commit + `, X-Linked-Etag: "` + sha256Hex(o.data) + `"`
		if got := RecordedOrigin(p); got != want {
			t.Fatalf("RecordedOrigin = %q, want %q", got, want)
		}
	})
	t.Run("Last-Modified without an ETag", func(t *testing.T) {
		o := newFakeOrigin(t, 64<<10)
		o.setData(o.data, "")
		f := testFetcher(t)
		p := mustEnsure(t, f, o.url(), Want{})
		o.mu.Lock()
		want := "Last-Modified: " + o.mod.UTC().Format(time.RFC1123)
		o.mu.Unlock()
		want = strings.Replace(want, "UTC", "GMT", 1)
		if got := RecordedOrigin(p); got != want {
			t.Fatalf("RecordedOrigin = %q, want %q", got, want)
		}
	})
	t.Run("kept across a resumed fetch", func(t *testing.T) {
		o := newFakeOrigin(t, 512<<10)
		o.setData(o.data, `"resumed"`)
		o.set(func(o *fakeOrigin) { o.cutAfter, o.cuts = 100<<10, 1 })
		f := testFetcher(t)
		f.Connections = 1
		p := mustEnsure(t, f, o.url(), Want{})
		assertFile(t, p, o.data)
		if got := RecordedOrigin(p); got != `ETag: "resumed"` {
			t.Fatalf("RecordedOrigin after a resume = %q", got)
		}
	})
	t.Run("length bounded", func(t *testing.T) {
		o := newFakeOrigin(t, 64<<10)
		o.setData(o.data, `"`+strings.Repeat("e", 400)+`"`)
		f := testFetcher(t)
		got := RecordedOrigin(mustEnsure(t, f, o.url(), Want{}))
		if len(got) != maxOrigin || !strings.HasPrefix(got, `ETag: "eee`) {
			t.Errorf("a 400-byte ETag recorded as %d bytes: %q", len(got), got)
		}
	})
}
