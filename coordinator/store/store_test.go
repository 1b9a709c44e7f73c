package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// mustOpen opens a fresh database file in a temp dir (never :memory:, whose
// journal mode is "memory" and whose pooled connections are separate
// databases) and closes it when the test ends.
func mustOpen(tb testing.TB) *DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "coordinator.db"))
}

func mustOpenPath(tb testing.TB, path string) *DB {
	tb.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func report(node string, seq int64, ws ...api.Weight) *api.Report {
	return &api.Report{
		ID: "r", Seq: seq, Started: t0, Time: t0.Add(time.Duration(seq) * time.Second),
		Node: node, Fabric: "ib-a", Looked: true, Weights: ws,
		Cache: api.Cache{Dir: "/var/cache/llmgw", FreeBytes: 100, TotalBytes: 200},
	}
}

func TestOpenPragmas(t *testing.T) {
	db := mustOpen(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		pragma string
		want   string
	}{
		{"wal", "journal_mode", "wal"},
		{"busy timeout", "busy_timeout", "5000"},
		{"synchronous normal", "synchronous", "1"},
		{"foreign keys", "foreign_keys", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pool := range []struct {
				name string
				q    querier
			}{{"writer", db.cw()}, {"reader", db.cr()}} {
				rows, err := pool.q.QueryContext(ctx, "PRAGMA "+tc.pragma)
				if err != nil {
					t.Fatal(err)
				}
				var got string
				rows.Next()
				rows.Scan(&got)
				rows.Close()
				if got != tc.want {
					t.Errorf("%s: PRAGMA %s = %q, want %q", pool.name, tc.pragma, got, tc.want)
				}
			}
		})
	}
	var pages int
	db.cw().QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&pages)
	if pages != walBackstopPages {
		t.Errorf("writer: PRAGMA wal_autocheckpoint = %d, want %d (the background checkpointer's backstop)", pages, walBackstopPages)
	}
	var v int
	db.cr().QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	if v != Migrations() || v == 0 {
		t.Errorf("user_version = %d, want %d", v, Migrations())
	}
	if _, err := db.cr().ExecContext(ctx, `DELETE FROM catalog`); err == nil {
		t.Error("the read pool accepted a write; it must be query-only")
	}
}

func TestOpenRefusesMemoryAndNewerSchema(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, ":memory:"); err == nil {
		t.Error("Open(:memory:) succeeded; the store needs a file")
	}
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.cw().ExecContext(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err := Open(ctx, path); err == nil {
		db.Close()
		t.Fatal("Open of a database from a newer llmgw succeeded")
	}
}

func TestCatalog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)

	m := api.Model{Name: "llama", Source: "/models/llama", Size: 14 << 30}
	got, created, err := db.PutModel(ctx, m, t0)
	if err != nil || !created || got.Created != t0 {
		t.Fatalf("PutModel(new) = %+v, %v, %v; want created at %v", got, created, err, t0)
	}
	m.Size = 15 << 30
	got, created, err = db.PutModel(ctx, m, t0.Add(time.Hour))
	if err != nil || created || got.Created != t0 || got.Updated != t0.Add(time.Hour) || got.Size != 15<<30 {
		t.Fatalf("PutModel(replace) = %+v, %v, %v", got, created, err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "other", Source: "/models/llama"}, t0); !errors.Is(err, ErrConflict) {
		t.Errorf("PutModel(same source, other name) error = %v, want ErrConflict", err)
	}
	if err := db.DeleteModel(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteModel(absent) = %v, want ErrNotFound", err)
	}
	if _, err := db.Model(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Model(absent) = %v, want ErrNotFound", err)
	}
	db.Close()

	db = mustOpenPath(t, path)
	models, err := db.Models(ctx)
	if err != nil || len(models) != 1 || models[0].Size != 15<<30 || models[0].Name != "llama" {
		t.Fatalf("after reopen Models() = %+v, %v", models, err)
	}
	if err := db.DeleteModel(ctx, "llama"); err != nil {
		t.Fatal(err)
	}
	if models, _ := db.Models(ctx); len(models) != 0 {
		t.Errorf("after delete Models() = %+v", models)
	}
}

func TestIngestMatching(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	const remote = "hf:org/repo/model.gguf"
	for _, m := range []api.Model{
		{Name: "by-path", Source: "/srv/models/llama/"},
		{Name: "by-cache", Source: remote},
		{Name: "by-id", Source: "Qwen/Qwen2.5-7B"},
		{Name: "by-id-rev", Source: "Org/M@abc123"},
		// Issue 8: a path source below a directory the node reports.
		{Name: "below", Source: "/models/llama/model.gguf"},
		{Name: "below-b", Source: "/models/two/b.gguf"},
		{Name: "below-a", Source: "/models/two/a/a.gguf"},
	} {
		if _, _, err := db.PutModel(ctx, m, t0); err != nil {
			t.Fatal(err)
		}
	}
	cachePath := catalog.CachePathFor("/var/cache/llmgw", remote)
	for _, tc := range []struct {
		name string
		w    api.Weight
		want string
	}{
		{"path source, same path", api.Weight{Path: "/srv/models/llama", Complete: true}, "by-path"},
		{"path source, other path", api.Weight{Path: "/srv/models/llama2", Complete: true}, ""},
		{"remote source in the node's cache", api.Weight{Path: cachePath, Complete: true}, "by-cache"},
		{"remote source's name outside the cache", api.Weight{Path: "/tmp/" + filepath.Base(cachePath), Complete: true}, ""},
		{"model id from a hub cache", api.Weight{Path: "/hub/models--Qwen--Qwen2.5-7B/snapshots/x", ModelID: "Qwen/Qwen2.5-7B", Complete: true}, "by-id"},
		{"model id at a revision", api.Weight{Path: "/hub/m/snapshots/abc123", ModelID: "Org/M", Revision: "abc123", Complete: true}, "by-id-rev"},
		{"model id at another revision", api.Weight{Path: "/hub/m/snapshots/def", ModelID: "Org/M", Revision: "def", Complete: true}, ""},
		{"incomplete copy still matches, not complete", api.Weight{Path: "/srv/models/llama", Complete: false, Problem: "missing shard"}, "by-path"},
		{"path source below a reported directory", api.Weight{Path: "/models/llama", Complete: true}, "below"},
		{"path source below, incomplete", api.Weight{Path: "/models/llama", Problem: "missing shard"}, "below"},
		{"path source itself", api.Weight{Path: "/models/llama/model.gguf", Complete: true}, "below"},
		{"a sibling directory is not above it", api.Weight{Path: "/models/llama2", Complete: true}, ""},
		{"a directory below the source is not it", api.Weight{Path: "/models/llama/model.gguf/x", Complete: true}, ""},
		{"two sources below one directory: the first in path order", api.Weight{Path: "/models/two", Complete: true}, "below-a"},
		{"the nearer directory of the other", api.Weight{Path: "/models/two/a", Complete: true}, "below-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := db.Ingest(ctx, []*api.Report{report("n1", db.meta["n1"].seq+1, tc.w)}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if !out[0].Stored {
				t.Fatal("report not stored")
			}
			ps, err := db.NodePresence(ctx, "n1")
			if err != nil || len(ps) != 1 {
				t.Fatalf("NodePresence = %+v, %v", ps, err)
			}
			if ps[0].Model != tc.want {
				t.Errorf("stored model = %q, want %q", ps[0].Model, tc.want)
			}
			var held []string
			for _, h := range out[0].Node.Holdings {
				held = append(held, h.Model)
				if h.Complete != tc.w.Complete {
					t.Errorf("holding %s complete = %v, want %v", h.Model, h.Complete, tc.w.Complete)
				}
			}
			if (tc.want == "") != (len(held) == 0) || len(held) > 0 && held[0] != tc.want {
				t.Errorf("Outcome holdings = %v, want %q", held, tc.want)
			}
		})
	}
}

func TestCatalogChangeRematches(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	const remote = "https://example.org/w/model.safetensors"
	r := report("n1", 1,
		api.Weight{Path: "/srv/llama", Complete: true, Shared: true},
		api.Weight{Path: catalog.CachePathFor("/var/cache/llmgw", remote), Complete: true},
		api.Weight{Path: "/hub/x", ModelID: "Qwen/Q", Complete: true},
	)
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil {
		t.Fatal(err)
	}
	models := func() map[string]string {
		ps, err := db.NodePresence(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, p := range ps {
			m[p.Path] = p.Model
		}
		return m
	}
	for _, m := range []api.Model{{Name: "a", Source: "/srv/llama"}, {Name: "b", Source: remote}, {Name: "c", Source: "Qwen/Q"}} {
		if _, _, err := db.PutModel(ctx, m, t0); err != nil {
			t.Fatal(err)
		}
	}
	got := models()
	if got["/srv/llama"] != "a" || got[r.Weights[1].Path] != "b" || got["/hub/x"] != "c" {
		t.Fatalf("after adding the catalog, presence models = %v", got)
	}
	// Pointing "a" elsewhere unmatches the old path.
	if _, _, err := db.PutModel(ctx, api.Model{Name: "a", Source: "/srv/other"}, t0); err != nil {
		t.Fatal(err)
	}
	if got := models(); got["/srv/llama"] != "" {
		t.Errorf("after moving model a, /srv/llama is still %q", got["/srv/llama"])
	}
	if err := db.DeleteModel(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := models(); got[r.Weights[1].Path] != "" {
		t.Errorf("after deleting b, its cache path is still %q", got[r.Weights[1].Path])
	}
	nodes, err := db.Nodes(ctx)
	if err != nil || len(nodes) != 1 || len(nodes[0].Holdings) != 1 || nodes[0].Holdings[0].Model != "c" {
		t.Fatalf("Nodes() = %+v, %v; want n1 holding c only", nodes, err)
	}
}

func TestIngestOrderAndReplacement(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	w1 := api.Weight{Path: "/m/a", Size: 1, Complete: true}
	w2 := api.Weight{Path: "/m/b", Size: 2, Complete: true}

	r1 := report("n1", 1, w1, w2)
	r1.Fetches = []api.Fetch{{Source: "hf:o/r/f", Done: 5, Total: 10}}
	r2 := report("n1", 2, w2)
	r3old := report("n1", 1, w1, w2)
	out, err := db.Ingest(ctx, []*api.Report{r1, r2, r3old}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Stored || !out[1].Stored || out[2].Stored {
		t.Fatalf("stored = %v %v %v, want true true false", out[0].Stored, out[1].Stored, out[2].Stored)
	}
	ps, _ := db.NodePresence(ctx, "n1")
	if len(ps) != 1 || ps[0].Path != "/m/b" {
		t.Fatalf("presence after r2 = %+v, want /m/b only", ps)
	}
	nodes, _ := db.Nodes(ctx)
	if len(nodes) != 1 || len(nodes[0].Fetches) != 0 || nodes[0].Seq != 2 {
		t.Fatalf("Nodes() = %+v; want seq 2 and no fetches", nodes[0])
	}
	// The same weights again change nothing (the fingerprint path).
	if out, err := db.Ingest(ctx, []*api.Report{report("n1", 3, w2)}, t0); err != nil || !out[0].Stored {
		t.Fatal(out, err)
	}
	if ps, _ := db.NodePresence(ctx, "n1"); len(ps) != 1 {
		t.Fatalf("presence after an unchanged report = %+v", ps)
	}

	// Report order survives a restart: an old report is still old.
	db.Close()
	db = mustOpenPath(t, path)
	if out, err := db.Ingest(ctx, []*api.Report{report("n1", 2, w1)}, t0); err != nil || out[0].Stored {
		t.Fatalf("after reopen, an older report: stored=%v err=%v; want dropped", out[0].Stored, err)
	}
	// A new agent process (later Started) starts again at seq 1.
	r := report("n1", 1, w1)
	r.Started = t0.Add(time.Hour)
	if out, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil || !out[0].Stored {
		t.Fatalf("report from a restarted agent: stored=%v err=%v", out[0].Stored, err)
	}
	// An agent whose clock went back is heard again once its node is stale.
	db.ReplaceAfter = time.Minute
	r = report("n1", 1, w2)
	if out, _ := db.Ingest(ctx, []*api.Report{r}, t0.Add(30*time.Second)); out[0].Stored {
		t.Error("older report accepted before ReplaceAfter")
	}
	if out, _ := db.Ingest(ctx, []*api.Report{r}, t0.Add(2*time.Minute)); !out[0].Stored {
		t.Error("older report refused after ReplaceAfter")
	}
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

func TestGCResults(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	in := []GCResult{{Path: "/c/0123456789abcdef-x", Action: "removed", Size: 9, Time: t0},
		{Path: "/etc/passwd", Action: "refused", Reason: "outside the cache dir", Time: t0}}
	if err := db.PutGCResults(ctx, "n1", in); err != nil {
		t.Fatal(err)
	}
	if err := db.PutGCResults(ctx, "n1", in[1:]); err != nil {
		t.Fatal(err)
	}
	got, err := db.GCResults(ctx, "")
	if err != nil || len(got) != 1 || got[0].Action != "refused" || got[0].Node != "n1" || !got[0].Time.Equal(t0) {
		t.Fatalf("GCResults = %+v, %v", got, err)
	}
}

// TestBackgroundCheckpoint checks that a commit is followed by a checkpoint
// off the writer, and that Close stops the checkpointer (a second Close,
// as tests do, must not hang or panic).
func TestBackgroundCheckpoint(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	before := db.checkpoints.Load()
	if _, err := db.Ingest(ctx, []*api.Report{report("n1", 1, api.Weight{Path: "/m/a", Complete: true})}, t0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for db.checkpoints.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("no background checkpoint within 5s of a commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
}

// TestCatalogIdentity: a database keeps one identity for life, another
// database has another, and every catalog change raises the generation.
func TestCatalogIdentity(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db := mustOpenPath(t, path)
	id, g0, err := db.CatalogIdentity(ctx)
	if err != nil || len(id) != 32 {
		t.Fatalf("identity %q, %v", id, err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "/models/m"}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "/models/m", Size: 3}, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteModel(ctx, "m"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if id1, g, err := db.CatalogIdentity(ctx); err != nil || id1 != id || g != g0+3 {
		t.Errorf("after two puts and a delete: %q generation %d, %v; want %q generation %d", id1, g, err, id, g0+3)
	}
	db.Close()
	if id1, g, err := mustOpenPath(t, path).CatalogIdentity(ctx); err != nil || id1 != id || g != g0+3 {
		t.Errorf("reopened: %q generation %d, %v; want %q generation %d", id1, g, err, id, g0+3)
	}
	if other, _, err := mustOpen(t).CatalogIdentity(ctx); err != nil || other == id {
		t.Errorf("another database: identity %q, %v; want one of its own", other, err)
	}
}
