package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
)

// evictEnv is a real coordinator on a real sqlite file, an origin on
// 127.0.0.1 serving files of given sizes, and real agents, each with its
// own socket, run dir and cache.
type evictEnv struct {
	t      *testing.T
	url    string
	admin  *api.Client
	origin *httptest.Server
	dir    string
	tokens map[string]string
}

func newEvictEnv(t *testing.T) *evictEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(ctx, filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(ctx, coordinator.Config{ReportInterval: time.Second}, coordinator.Tokens{Admin: "admin-secret"}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /NAME-SIZE.gguf: SIZE MiB of NAME's byte.
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), ".gguf")
		var mib int
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			for _, c := range name[i+1:] {
				mib = mib*10 + int(c-'0')
			}
		}
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), bytes.NewReader(bytes.Repeat([]byte{name[0]}, mib<<20)))
	}))
	t.Cleanup(origin.Close)
	return &evictEnv{t: t, url: ts.URL, admin: &api.Client{BaseURL: ts.URL, Token: "admin-secret"}, origin: origin, dir: dir, tokens: map[string]string{}}
}

func (e *evictEnv) src(name string, mib int) string {
	return e.origin.URL + "/" + name + "-" + itoa(mib) + ".gguf"
}

func itoa(n int) string { return strconv.Itoa(n) }

// pollUntil polls cond every 100 ms until it holds or within passes.
func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *evictEnv) add(name string, mib int) {
	e.t.Helper()
	if _, err := e.admin.PutModel(context.Background(), api.Model{Name: name, Source: e.src(name, mib)}); err != nil {
		e.t.Fatal(err)
	}
}

func writeToken(t *testing.T, tok string) string {
	p := filepath.Join(t.TempDir(), "token")
	os.WriteFile(p, []byte(tok+"\n"), 0o600)
	return p
}
