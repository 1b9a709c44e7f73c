package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

func TestPins(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	src := "https://example.org/w.gguf"
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: src}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pin(ctx, "https://example.org/other.gguf", a, "", "n1", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("pin of a source in no entry: %v; want ErrNotFound", err)
	}
	m, err := db.Pin(ctx, src, a, `"etag-1"`, "n1", t0)
	if err != nil || m.Pinned != a || m.PinnedETag != `"etag-1"` {
		t.Fatalf("first pin: %+v, %v", m, err)
	}
	if m, err := db.Pin(ctx, src, a, "", "n2", t0); err != nil || m.Pinned != a {
		t.Errorf("the same bytes again: %+v, %v", m, err)
	}
	var conflict *PinConflict
	if _, err := db.Pin(ctx, src, b, "", "n3", t0); !errors.As(err, &conflict) || conflict.Model.Pinned != a || conflict.Offered != b {
		t.Errorf("other bytes: %v; want a PinConflict naming both", err)
	}
	for _, read := range []func() (api.Model, error){
		func() (api.Model, error) { return db.Model(ctx, "m") },
		func() (api.Model, error) { ms, err := db.Models(ctx); return ms[0], err },
	} {
		if m, err := read(); err != nil || m.Pinned != a || m.PinnedETag != `"etag-1"` {
			t.Errorf("read back: %+v, %v", m, err)
		}
	}

	// Repin forgets; the next pin takes.
	if err := db.Unpin(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if err := db.Unpin(ctx, "nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("repin of no entry: %v; want ErrNotFound", err)
	}
	if m, err := db.Pin(ctx, src, b, "", "n3", t0); err != nil || m.Pinned != b {
		t.Errorf("pin after repin: %+v, %v", m, err)
	}

	// A pin is of one source's bytes: a new source starts unpinned, and a
	// declared digest is never shadowed.
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "https://example.org/v2.gguf"}, t0); err != nil {
		t.Fatal(err)
	}
	if m, _ := db.Model(ctx, "m"); m.Pinned != "" {
		t.Errorf("after a change of source the entry keeps pin %s", m.Pinned)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "d", Source: src, SHA256: a}, t0); err != nil {
		t.Fatal(err)
	}
	if m, err := db.Pin(ctx, src, b, "", "n1", t0); err != nil || m.Pinned != "" || m.SHA256 != a {
		t.Errorf("pin of a declared entry: %+v, %v; want the declared digest alone", m, err)
	}
	// Removing the entry removes its pin.
	if _, err := db.Pin(ctx, "https://example.org/v2.gguf", a, "", "n1", t0); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.cr().QueryRowContext(ctx, `SELECT count(*) FROM pins`).Scan(&n); err != nil || n != 0 {
		t.Errorf("pins left after the entry went: %d, %v", n, err)
	}
}

// pinsMigration is the number of the migration that makes the pins table
// (migrations/0006_pins.sql).
const pinsMigration = 6

// A database made before pins existed (every migration before the one
// that makes the pins table) gets the table on open.
func TestPinsMigrateAnOlderDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.cw().ExecContext(ctx, fmt.Sprintf(undoLater+`DROP TABLE seed_asks; DROP TABLE seed_requests; DROP TABLE catalog_files; DROP TABLE pins; PRAGMA user_version = %d`, pinsMigration-1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpenPath(t, path)
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "https://example.org/w.gguf"}, t0); err != nil {
		t.Fatal(err)
	}
	if m, err := db.Pin(ctx, "https://example.org/w.gguf", strings.Repeat("c", 64), "", "n1", t0); err != nil || m.Pinned == "" {
		t.Errorf("pin on a migrated database: %+v, %v", m, err)
	}
}
