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

	"github.com/llmgw/llmgw/weights/catalog"
)

// EnsureIn fetches a file of a model of several into its set directory
// under the file's own name, beside the others, verified as Ensure
// verifies; a name that is no set directory's is refused before anything
// is touched.
func TestEnsureIn(t *testing.T) {
	data := randomBytes(t, 256<<10)
	// Every path serves the same bytes: the files of a set differ by name.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "w.gguf", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	f := testFetcher(t)
	m := catalog.Model{Name: "m", Files: []catalog.File{
		{Source: srv.URL + "/w-00001-of-00002.gguf"}, {Source: srv.URL + "/w-00002-of-00002.gguf"},
	}}
	set := catalog.SetName(m)
	ctx := context.Background()
	for _, file := range m.Files {
		p, err := f.EnsureIn(ctx, set, file.Source, Want{SHA256: sha256Hex(data)})
		if err != nil {
			t.Fatal(err)
		}
		if want := catalog.SetFilePath(filepath.Join(f.CacheDir, set), file.Source); p != want {
			t.Errorf("EnsureIn(%s) = %s, want %s", file.Source, p, want)
		}
		assertFile(t, p, data)
		if _, err := os.Stat(catalog.CachePathFor(f.CacheDir, file.Source)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the file also landed under its single cache name: %v", err)
		}
	}
	other := srv.URL + "/other-00001-of-00002.gguf"
	_, err := f.EnsureIn(ctx, set, other, Want{SHA256: strings.Repeat("0", 64)})
	var fe *Error
	if !errors.As(err, &fe) || fe.Op != "verify" || fe.Source != other {
		t.Errorf("a file of other bytes than wanted: %v; want a verify error naming its source", err)
	}
	if _, err := os.Stat(filepath.Join(f.CacheDir, set, "other-00001-of-00002.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unverified file got its name: %v", err)
	}
	for _, bad := range []string{"", "../x.set", catalog.CacheName(m.Files[0].Source), "0123456789abcdef-x.set/y"} {
		if _, err := f.EnsureIn(ctx, bad, m.Files[0].Source, Want{}); !errors.As(err, &fe) || fe.Op != "parse" {
			t.Errorf("EnsureIn into %q: %v; want refused", bad, err)
		}
	}
	if _, err := f.EnsureIn(ctx, set, "/models/w.gguf", Want{}); !errors.As(err, &fe) || fe.Op != "parse" {
		t.Errorf("EnsureIn of a path: %v; want refused", err)
	}
}
