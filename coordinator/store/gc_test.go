package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

func TestGCRequestLifecycle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	st := api.GCStatus{ID: "g1", Collect: true, Created: t0, Deadline: t0.Add(time.Minute),
		Nodes: []api.GCNode{{Node: "n1"}, {Node: "n2"}}}
	if err := db.CreateGC(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateGC(ctx, st); err == nil {
		t.Error("a second request with the same id was stored")
	}
	pend, err := db.PendingGC(ctx, t0.Add(time.Second))
	if err != nil || len(pend) != 1 || len(pend[0].Nodes) != 2 || !pend[0].Collect {
		t.Fatalf("PendingGC = %+v, %v", pend, err)
	}
	if err := db.HandGC(ctx, "g1", "n1", []string{"0123456789abcdef-x.gguf"}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := db.HandGC(ctx, "g1", "n9", nil, t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("HandGC(node not asked) = %v, want ErrNotFound", err)
	}
	pend, _ = db.PendingGC(ctx, t0.Add(2*time.Second))
	if len(pend) != 1 || len(pend[0].Nodes) != 1 || pend[0].Nodes[0].Node != "n2" {
		t.Errorf("PendingGC after handing n1 = %+v, want only n2", pend)
	}
	if pend, _ := db.PendingGC(ctx, t0.Add(time.Minute)); len(pend) != 0 {
		t.Errorf("PendingGC at the deadline = %+v, want none", pend)
	}

	ans := api.GCAnswer{Node: "n1", CacheDir: "/c", Collect: true, Freed: 9, Files: []api.GCFile{
		{Name: "0123456789abcdef-x.gguf", Path: "/c/0123456789abcdef-x.gguf", Asked: true, Action: "removed", Reason: "no catalog entry wants it", Size: 9},
		{Name: "../etc/passwd", Asked: true, Action: "refused", Reason: "a path"},
		{Name: "/c/0123456789abcdef-x.gguf", Asked: true, Action: "refused", Reason: "an absolute path"},
	}}
	if err := db.AnswerGC(ctx, "g1", ans, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := db.AnswerGC(ctx, "g1", ans, t0.Add(4*time.Second)); !errors.Is(err, ErrConflict) {
		t.Errorf("a second answer = %v, want ErrConflict", err)
	}
	if err := db.AnswerGC(ctx, "nope", ans, t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("an answer to no request = %v, want ErrNotFound", err)
	}
	got, err := db.GC(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Nodes) != 2 || got.Nodes[0].Node != "n1" || got.Nodes[1].Answer != nil || !got.Nodes[1].Handed.IsZero() {
		t.Fatalf("GC = %+v", got)
	}
	n1 := got.Nodes[0]
	if n1.Answer == nil || n1.Answer.Freed != 9 || len(n1.Answer.Files) != 3 || len(n1.Asked) != 1 || !n1.Answered.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("n1 = %+v (answer %+v)", n1, n1.Answer)
	}
	// The node's last gc results are this answer, name by name.
	res, err := db.GCResults(ctx, "n1")
	if err != nil || len(res) != 3 || res[0].Request != "g1" || res[0].Name != "../etc/passwd" || !res[0].Asked {
		t.Errorf("GCResults = %+v, %v", res, err)
	}
	if _, err := db.GC(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GC(unknown) = %v, want ErrNotFound", err)
	}

	// A request more than a week older than a new one goes.
	later := api.GCStatus{ID: "g2", Created: t0.Add(8 * 24 * time.Hour), Deadline: t0.Add(8*24*time.Hour + time.Minute)}
	if err := db.CreateGC(ctx, later); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GC(ctx, "g1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a request older than a week is still there: %v", err)
	}
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestGCMigrationKeepsResults: a database from before gc requests keeps its
// stored gc results, now named by their path.
func TestGCMigrationKeepsResults(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := migrationFS.ReadFile("migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{string(schema), "PRAGMA user_version = 1",
		`INSERT INTO gc_results (node, path, action, reason, bytes, time) VALUES ('n1', '/c/0123456789abcdef-x', 'removed', '', 9, 1)`} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	db := mustOpenPath(t, path)
	got, err := db.GCResults(ctx, "")
	if err != nil || len(got) != 1 || got[0].Name != "/c/0123456789abcdef-x" || got[0].Path != got[0].Name || got[0].Size != 9 {
		t.Fatalf("GCResults after migration = %+v, %v", got, err)
	}
}
