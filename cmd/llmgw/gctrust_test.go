package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
)

// onceAgent is node's agent run once (scan, report, catalog refresh), as
// `llmgw agent --once` runs it, against coordinator url.
func onceAgent(t *testing.T, e *evictEnv, node, url, cache string) catalog.Copy {
	t.Helper()
	tok, ok := e.tokens[node]
	if !ok {
		made, err := e.admin.NewNodeToken(context.Background(), node)
		if err != nil {
			t.Fatal(err)
		}
		tok = made.Token
		e.tokens[node] = tok
	}
	nd := filepath.Join(e.dir, node)
	os.MkdirAll(nd, 0o755)
	tokFile := filepath.Join(nd, "token")
	os.WriteFile(tokFile, []byte(tok+"\n"), 0o600)
	log := logrus.New()
	log.SetOutput(io.Discard)
	a, err := agent.New(agent.Config{Node: node, Fabric: "f1", Coordinator: url, TokenFile: tokFile, CacheDir: cache,
		StateDir: filepath.Join(nd, "state"), RunDir: filepath.Join(nd, "run"), Socket: filepath.Join(nd, "a.sock"), Version: "test"}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, sent, err := a.Once(context.Background()); !sent {
		t.Fatalf("agent --once for %s: %v", node, err)
	}
	cp, err := catalog.ReadCopy(filepath.Join(nd, "state", "catalog.json"))
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// epilogGC is node gc as the Epilog runs it: collect, gc_max_share 50%.
func epilogGC(t *testing.T, e *evictEnv, node, cache string) gc.Result {
	cp, cerr := catalog.ReadCopy(filepath.Join(e.dir, node, "state", "catalog.json"))
	return gc.Run(gc.Options{CacheDir: cache, Catalog: cp, CatalogErr: cerr, RunDir: filepath.Join(e.dir, node, "run"),
		Collect: true, MaxShare: 50, Recent: 10 * time.Minute})
}

// TestModelUpgradeFreesTheOldFile is item 1: a node whose cache is mostly
// one model, whose source an admin replaces (models add over the entry):
// the old file is 100% of what gc would remove, more than gc_max_share,
// and on main gc refused the whole run, so the new version never fitted
// beside the old. The coordinator now names what the admin's change
// dropped, and gc removes it without counting it against the share.
func TestModelUpgradeFreesTheOldFile(t *testing.T) {
	e := newEvictEnv(t)
	ctx := context.Background()
	cache := filepath.Join(e.dir, "n1-cache")
	e.add("m", 4)
	onceAgent(t, e, "n1", e.url, cache)
	code, out, errs := llmgwRun(t, map[string]string{}, "fetch", e.src("m", 4), "--cache-dir", cache, "--lock-dir", cache+".locks")
	if code != 0 {
		t.Fatalf("llmgw fetch: %s", errs)
	}
	old := strings.TrimSpace(out)
	long := time.Now().Add(-time.Hour)
	os.Chtimes(old, long, long)
	// The upgrade: same name, new source.
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: e.src("m2", 4)}); err != nil {
		t.Fatal(err)
	}
	cp := onceAgent(t, e, "n1", e.url, cache)
	if m, ok := cp.SupersededBy(filepath.Base(old)); !ok || m != "m" {
		t.Fatalf("the node's catalog copy does not name the replaced file as dropped from m: %v", cp.Superseded)
	}
	r := epilogGC(t, e, "n1", cache)
	if r.Held != "" || r.Count(gc.Removed) != 1 {
		t.Fatalf("gc after an admin replaced the model's source: held %q, files %+v; want the old file removed", r.Held, r.Files)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old version is still there: %v", err)
	}
}

// TestRestoredCoordinatorIsNotTrustedAgain is item 4: a coordinator
// database restored from a backup is older than the catalog a node
// collected against, and on main the node trusted it again as soon as its
// generation counter climbed back. The node now finds its anchor missing
// from the catalog's history however many changes the restored database
// makes; `llmgw status` says gc is held on the node and why; and `llmgw gc
// --trust` has it adopt the catalog, with gc_max_share still in force.
func TestRestoredCoordinatorIsNotTrustedAgain(t *testing.T) {
	e := newEvictEnv(t)
	ctx := context.Background()
	cache := filepath.Join(e.dir, "n1-cache")
	e.add("a", 1)
	e.add("b", 1)
	// The backup, taken now.
	backup := filepath.Join(e.dir, "backup.db")
	copyDB(t, filepath.Join(e.dir, "c.db"), backup)
	// Life goes on: two more changes, which the node trusts.
	e.add("c", 1)
	e.add("d", 1)
	if cp := onceAgent(t, e, "n1", e.url, cache); cp.Distrust() != "" {
		t.Fatalf("the node distrusts the live catalog: %s", cp.Distrust())
	}
	// The restore: a coordinator on the backup, which then makes more
	// changes than the live one had.
	db, err := store.Open(ctx, backup)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(ctx, coordinator.Config{ReportInterval: time.Second}, coordinator.Tokens{Admin: "admin-secret"}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	restored := &api.Client{BaseURL: ts.URL, Token: "admin-secret"}
	for _, m := range []string{"x", "y", "z"} {
		if _, err := restored.PutModel(ctx, api.Model{Name: m, Source: e.src(m, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	cat, _ := restored.Catalog(ctx)
	e.tokens = map[string]string{} // the restored database has its own tokens
	e.admin = restored
	cp := onceAgent(t, e, "n1", ts.URL, cache)
	if cat.Generation <= 5 || cp.Distrust() == "" || !strings.Contains(cp.Distrust(), "does not descend") {
		t.Fatalf("a restored catalog at generation %d (the node saw 5): distrust %q; want it distrusted as not descending", cat.Generation, cp.Distrust())
	}
	// Said in llmgw status once the node reports its hold.
	onceAgent(t, e, "n1", ts.URL, cache)
	env := map[string]string{"LLMGW_COORDINATOR": ts.URL, "LLMGW_TOKEN_FILE": writeToken(t, "admin-secret")}
	code, out, errs := llmgwRun(t, env, "status")
	if code != 0 || !strings.Contains(out, "GC HELD on 1 node since") || !strings.Contains(out, "n1") || !strings.Contains(out, "llmgw gc --trust") {
		t.Errorf("llmgw status with n1's gc held: %d\n%s%s", code, out, errs)
	}
	if resp, err := http.Get(ts.URL + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "llmgw_coordinator_nodes_gc_held 1") {
			t.Errorf("/metrics does not count n1's held gc:\n%s", grepLines(string(b), "gc_held"))
		}
	}
	// An admin adopts it; the node, reading the catalog, trusts it.
	code, out, errs = llmgwRun(t, env, "gc", "--trust", "--node", "n1")
	if code != 0 && !strings.Contains(errs, "did not answer") {
		t.Fatalf("llmgw gc --trust: %d %s %s", code, out, errs)
	}
	if cp := onceAgent(t, e, "n1", ts.URL, cache); cp.Distrust() != "" {
		t.Fatalf("after llmgw gc --trust the node still distrusts the catalog: %s", cp.Distrust())
	}
	onceAgent(t, e, "n1", ts.URL, cache)
	if code, out, _ := llmgwRun(t, env, "status"); code != 0 || strings.Contains(out, "GC HELD") {
		t.Errorf("llmgw status after the node adopted the catalog still says gc is held:\n%s", out)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// copyDB copies a quiet sqlite database, its WAL with it, as a file
// backup of a coordinator's host would.
func copyDB(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(from + suffix)
		if err != nil {
			if suffix != "" && os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if err := os.WriteFile(to+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelsMv is item 8's rename: `llmgw models mv OLD NEW` moves an
// entry in one step, and the node that holds it holds it under the new
// name with nothing for gc to collect; on main a rename was rm then add,
// between which a node's gc found the files unwanted.
func TestModelsMv(t *testing.T) {
	e := newEvictEnv(t)
	ctx := context.Background()
	cache := filepath.Join(e.dir, "n1-cache")
	e.add("old", 1)
	env := map[string]string{"LLMGW_COORDINATOR": e.url, "LLMGW_TOKEN_FILE": writeToken(t, "admin-secret")}
	code, out, errs := llmgwRun(t, env, "fetch", "old", "--cache-dir", cache, "--lock-dir", cache+".locks")
	if code != 0 {
		t.Fatalf("llmgw fetch old: %s", errs)
	}
	path := strings.TrimSpace(out)
	long := time.Now().Add(-time.Hour)
	os.Chtimes(path, long, long)
	onceAgent(t, e, "n1", e.url, cache)

	code, out, errs = llmgwRun(t, env, "models", "mv", "old", "new")
	if code != 0 || !strings.Contains(out, "new -> "+e.src("old", 1)+" (was old)") {
		t.Fatalf("llmgw models mv old new: %d %q %s", code, out, errs)
	}
	st, err := e.admin.ModelStatus(ctx, "new")
	if err != nil || len(st.Nodes) != 1 || st.Nodes[0].Node != "n1" || st.Nodes[0].Holds == api.HoldNone {
		t.Fatalf("status of new right after the move: %+v, %v; want n1 holding it without a new report", st, err)
	}
	if _, err := e.admin.ModelStatus(ctx, "old"); err == nil {
		t.Error("old is still in the catalog")
	}
	cp := onceAgent(t, e, "n1", e.url, cache)
	if _, ok := cp.Lookup("new"); !ok {
		t.Fatalf("the node's catalog copy lacks new: %+v", cp.Models)
	}
	if r := epilogGC(t, e, "n1", cache); len(r.Files) != 0 || r.Held != "" {
		t.Errorf("gc after the move: %+v (held %q); want nothing to collect", r.Files, r.Held)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the weights are gone after the move: %v", err)
	}
	// Onto a name that exists: refused, nothing changed.
	e.add("other", 1)
	if code, _, errs := llmgwRun(t, env, "models", "mv", "new", "other"); code == 0 || !strings.Contains(errs, "already exists") {
		t.Errorf("models mv onto an existing name: %d %s", code, errs)
	}
}

// `llmgw gc --help` names every guard and which flag lifts it.
func TestGCHelpNamesTheGuards(t *testing.T) {
	code, out, errs := llmgwRun(t, map[string]string{}, "gc", "--help")
	text := out + errs
	if code != 0 {
		t.Fatalf("llmgw gc --help: exit %d", code)
	}
	for _, want := range []string{"never lifted, --force or not", "gc_interval", "after which it can go",
		"lifted by --trust (and by --force)", "does not descend", "lifted by --force only", "gc_max_share",
		"models add or models rm", "held whatever the flags", "--trust"} {
		if !strings.Contains(text, want) {
			t.Errorf("llmgw gc --help lacks %q", want)
		}
	}
}
