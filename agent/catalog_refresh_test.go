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

// TestCatalogTrustReachesNodeNotAsked: a node that distrusts the catalog
// adopts an admin's gc --trust at its next report even when the gc
// request did not ask it (it was down, or another node was named): the
// adoption travels in the catalog's answer, and the report's tag changes
// with it. The tag digested the entries alone, so the node, whose copy
// matched the tag, never read the answer that carried the adoption, and
// its gc stayed held.
func TestCatalogTrustReachesNodeNotAsked(t *testing.T) {
	ctx := context.Background()
	cc := newCatalogCoord(t)
	if _, err := cc.admin.PutModel(ctx, api.Model{Name: "a", Source: "/models/a.gguf"}); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := func(node string) (*Agent, Config) {
		cfg := testConfig(t)
		cfg.Node, cfg.Coordinator, cfg.TokenFile = node, cc.url, token
		return newTestAgent(t, cfg), cfg
	}
	a, cfg := agent("n1")
	other, _ := agent("n2")
	report := func(a *Agent, what string) {
		t.Helper()
		if _, _, err := a.report(ctx); err != nil {
			t.Fatalf("%s: report: %v", what, err)
		}
	}
	report(a, "n1's first report")
	report(other, "n2's first report")

	// n1's copy is anchored to a change the catalog's history does not
	// hold (a database restored from a backup looks so to it): its gc is
	// held once it reads the catalog again.
	cp, err := catalog.ReadCopy(cfg.CatalogCopyPath())
	if err != nil {
		t.Fatal(err)
	}
	cp.TrustedChange = "0123456789abcdef"
	if err := catalog.WritePrivateCopy(cfg.CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	report(a, "n1's report after its anchor moved")
	if a.Status().Catalog.GCHeld == "" {
		t.Fatal("n1 does not hold its gc on a catalog whose history lacks its anchor")
	}
	reads := cc.reads.Load()
	report(a, "n1's report, catalog unchanged")
	if got := cc.reads.Load(); got != reads {
		t.Errorf("n1 read the catalog again with nothing changed: %d reads, want %d", got, reads)
	}

	// The admin adopts the catalog, asking n2 only.
	if _, err := cc.admin.StartGC(ctx, api.GCRequest{Trust: true, Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	report(a, "n1's report after gc --trust")
	if got := cc.reads.Load(); got != reads+1 {
		t.Errorf("n1 read the catalog %d times after gc --trust, want once", got-reads)
	}
	if held := a.Status().Catalog.GCHeld; held != "" {
		t.Errorf("n1's gc is still held after an admin adopted the catalog: %s", held)
	}
	if cp, err := catalog.ReadCopy(cfg.CatalogCopyPath()); err != nil || cp.Distrust() != "" {
		t.Errorf("n1's copy after gc --trust: %v, distrust %q; want it trusted", err, cp.Distrust())
	}
}
