package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

// catalogCoord is the real coordinator on a sqlite file, behind a server
// that counts the catalog reads (GET /v1/models) it answers.
type catalogCoord struct {
	url   string
	admin *api.Client
	reads atomic.Int64
}

func newCatalogCoord(t *testing.T) *catalogCoord {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	srv, err := coordinator.New(ctx, coordinator.Config{ReportInterval: 30 * time.Second}, coordinator.Tokens{Admin: "admin-secret"}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	cc := &catalogCoord{}
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
			cc.reads.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
		db.Close()
	})
	cc.url = ts.URL
	cc.admin = &api.Client{BaseURL: ts.URL, Token: "admin-secret"}
	return cc
}

// TestCatalogReadOnlyWhenChanged: an agent reads the catalog after a
// report only when the coordinator's answer names another catalog than
// the one its copy holds: every node read the whole catalog after every
// report, which for Hub models' file lists is tens of megabytes a second
// at ten thousand nodes (issue 25's known gap). An entry added, a copy
// removed, or a copy another process rewrote, is read again at once.
func TestCatalogReadOnlyWhenChanged(t *testing.T) {
	ctx := context.Background()
	cc := newCatalogCoord(t)
	if _, err := cc.admin.PutModel(ctx, api.Model{Name: "a", Source: "/models/a.gguf"}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Coordinator = cc.url
	cfg.TokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.TokenFile, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	report := func(wantReads int64, what string) catalog.Copy {
		t.Helper()
		if _, _, err := a.report(ctx); err != nil {
			t.Fatalf("%s: report: %v", what, err)
		}
		if got := cc.reads.Load(); got != wantReads {
			t.Errorf("%s: %d catalog reads in all, want %d", what, got, wantReads)
		}
		cp, err := catalog.ReadCopy(cfg.CatalogCopyPath())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return cp
	}
	report(1, "first report")
	report(1, "second report, catalog unchanged")
	cp := report(1, "third report, catalog unchanged")
	if _, ok := cp.Lookup("a"); !ok {
		t.Fatalf("the copy lacks model a: %+v", cp.Models)
	}
	if st := a.Status().Catalog; st.Checked.Before(st.Fetched) || st.Checked.IsZero() {
		t.Errorf("status says the copy was checked at %v, fetched at %v; want checked at the last report", st.Checked, st.Fetched)
	}

	if _, err := cc.admin.PutModel(ctx, api.Model{Name: "b", Source: "/models/b.gguf"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := report(2, "after a model was added").Lookup("b"); !ok {
		t.Error("the copy lacks model b, added before the report")
	}
	report(2, "unchanged again")

	os.Remove(catalog.PrivateCopyPath(cfg.CatalogCopyPath()))
	report(3, "after the private copy was removed")
	if _, err := os.Stat(catalog.PrivateCopyPath(cfg.CatalogCopyPath())); err != nil {
		t.Errorf("the private copy was not written again: %v", err)
	}

	// A Prolog that read the catalog itself rewrites the copy, perhaps
	// with an older answer: the agent reads it again.
	old, _ := catalog.ReadCopy(cfg.CatalogCopyPath())
	old.Models = old.Models[:1]
	if _, err := catalog.UpdateCopy(cfg.CatalogCopyPath(), old); err != nil {
		t.Fatal(err)
	}
	if _, ok := report(4, "after another process rewrote the copy").Lookup("b"); !ok {
		t.Error("the copy another process rewrote without model b was kept")
	}
}

// TestCatalogReadEachReportFromOldCoordinator: a coordinator that names no
// catalog in its answers (one older than that) has the catalog read after
// every report, as before.
func TestCatalogReadEachReportFromOldCoordinator(t *testing.T) {
	fc := newFakeCoord(t)
	var reads atomic.Int64
	inner := fc.srv.Config.Handler
	fc.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			reads.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	a := newTestAgent(t, cfg)
	for i := 1; i <= 3; i++ {
		if _, _, err := a.report(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := reads.Load(); got != int64(i) {
			t.Errorf("after report %d: %d catalog reads, want %d", i, got, i)
		}
	}
}
