package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// releasedMigrations is how many migrations the last released llmgw
// applied (0001 to 0008): a database it left must open in this one.
const releasedMigrations = 8

// undoLater undoes what the migrations after 0008 made (0009's chunk
// digests and peer addresses, 0010's Hub tables, 0011's heartbeat, 0012's
// history, adoption and columns, 0013's Hugging Face cache room), for the
// tests that take a database back to an older schema and have the
// migrations run again: after it, user_version is releasedMigrations (or
// lower, with more undone). TestUndoLaterLeavesTheReleasedSchema fails
// when a migration is added and this is not told.
const undoLater = `DROP TABLE IF EXISTS chunk_sums; ALTER TABLE nodes DROP COLUMN peer_addr;
	DROP TABLE IF EXISTS catalog_hub_files; DROP TABLE IF EXISTS catalog_hub;
	DROP TABLE IF EXISTS heartbeat; DROP TABLE IF EXISTS catalog_changes; DROP TABLE IF EXISTS catalog_dropped;
	DROP TABLE IF EXISTS catalog_trust; ALTER TABLE gc_requests DROP COLUMN trust;
	ALTER TABLE nodes DROP COLUMN gc_held; ALTER TABLE nodes DROP COLUMN gc_held_since;
	ALTER TABLE nodes DROP COLUMN hf_cache_free_bytes; ALTER TABLE nodes DROP COLUMN hf_cache_total_bytes; `

// schemaOf describes a database's schema by what a query can see: each
// table's and index's name, and each table's columns with their types,
// constraints and defaults. (The CREATE text itself differs in spacing
// after an ALTER TABLE, which the tests do not care about.)
func schemaOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	var out, tables []string
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name)
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	for _, tb := range tables {
		cols, err := db.Query(fmt.Sprintf(`SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_xinfo('%s') ORDER BY cid`, tb))
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var name, typ, dflt string
			var notnull, pk int
			if err := cols.Scan(&name, &typ, &notnull, &dflt, &pk); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("  %s.%s %s notnull=%d default=%q pk=%d", tb, name, typ, notnull, dflt, pk))
		}
		cols.Close()
	}
	return out
}

// releasedDB makes, at path, a database as the last released llmgw left
// it: its migrations and nothing after them.
func releasedDB(t *testing.T, path string) {
	t.Helper()
	names, err := migrationNames()
	if err != nil || len(names) <= releasedMigrations || !strings.HasPrefix(filepath.Base(names[releasedMigrations-1]), "0008_") {
		t.Fatalf("migrations %v (%v): want 0008 as the %dth", names, err, releasedMigrations)
	}
	old, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for _, n := range names[:releasedMigrations] {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	if _, err := old.Exec(fmt.Sprintf("PRAGMA user_version = %d", releasedMigrations)); err != nil {
		t.Fatal(err)
	}
}

// undoLater takes a database of this build back to exactly the released
// schema, so the tests that use it start where a real older database does.
func TestUndoLaterLeavesTheReleasedSchema(t *testing.T) {
	dir := t.TempDir()
	releasedDB(t, filepath.Join(dir, "released.db"))
	want, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "released.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()

	db := mustOpenPath(t, filepath.Join(dir, "undone.db"))
	if _, err := db.cw().Exec(undoLater + fmt.Sprintf("PRAGMA user_version = %d", releasedMigrations)); err != nil {
		t.Fatal(err)
	}
	if w, g := schemaOf(t, want), schemaOf(t, db.cr()); !reflect.DeepEqual(w, g) {
		t.Errorf("undoLater leaves a schema other than 0008's: a migration after 0008 is not undone, or too much is.\n got: %s\nwant: %s",
			strings.Join(g, "\n      "), strings.Join(w, "\n      "))
	}
}

// A database at the last released schema migrates to this build's in one
// open, keeps what it held, and takes what the later migrations brought:
// the heartbeat (/readyz), the catalog's history, a node's peer address,
// gc hold and Hugging Face cache room, and Hub models.
func TestReleasedSchemaMigrates(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	releasedDB(t, path)
	// What a released coordinator wrote: a model of one file, a node, and a
	// gc request; the catalog's identity the migrations made.
	old, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO catalog (name, source, created, updated) VALUES ('m', 'https://example.org/w.gguf', 1, 1)`,
		`INSERT INTO nodes (name, fabric, looked, received, report_time, report_id, started, seq) VALUES ('n1', 'f1', 1, 1, 1, 'r', 1, 1)`,
		`INSERT INTO gc_requests (id, collect, created, deadline) VALUES ('g1', 0, 1, 2)`,
	} {
		if _, err := old.Exec(q); err != nil {
			old.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	var id string
	var gen int64
	if err := old.QueryRow(`SELECT id, generation FROM catalog_identity`).Scan(&id, &gen); err != nil {
		old.Close()
		t.Fatal(err)
	}
	old.Close()

	db := mustOpenPath(t, path)
	var v int
	db.cr().QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	if v != Migrations() {
		t.Fatalf("user_version = %d after open, want %d", v, Migrations())
	}
	if ms, err := db.Models(ctx); err != nil || len(ms) != 1 || ms[0].Name != "m" {
		t.Errorf("catalog after the migration: %+v, %v", ms, err)
	}
	if gotID, gotGen, err := db.CatalogIdentity(ctx); err != nil || gotID != id || gotGen != gen {
		t.Errorf("catalog identity after the migration: %s %d, %v; want %s %d as before", gotID, gotGen, err, id, gen)
	}
	// The history starts from the generation nodes last saw, so a node
	// that trusted the released coordinator trusts the migrated one.
	if hist, _, _, _, err := db.CatalogHistory(ctx); err != nil || len(hist) != 1 {
		t.Errorf("catalog history after the migration: %v, %v; want the one change standing for generation %d", hist, err, gen)
	}
	if _, err := db.GC(ctx, "g1"); err != nil {
		t.Errorf("gc request after the migration: %v", err)
	}
	if err := db.CanWrite(ctx); err != nil {
		t.Errorf("the heartbeat after the migration: %v", err)
	}
	// The released coordinator's node takes a report with what the later
	// migrations keep of it: its peer address (0009), its gc hold (0012)
	// and its Hugging Face cache's room (0013).
	if ns, err := db.Nodes(ctx); err != nil || len(ns) != 1 || ns[0].Name != "n1" || ns[0].HFCacheTotal != 0 {
		t.Errorf("nodes after the migration: %+v, %v; want n1 with no Hugging Face cache room reported", ns, err)
	}
	r := report("n1", 2)
	r.PeerAddr, r.GCHeld, r.GCHeldSince = "127.0.0.11:7446", "a catalog this node does not trust", t0
	r.HFCache = &api.Cache{Dir: "/scratch/hf", FreeBytes: 5, TotalBytes: 9}
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0.Add(time.Minute)); err != nil {
		t.Fatalf("a report on the migrated database: %v", err)
	}
	if ns, err := db.Nodes(ctx); err != nil || len(ns) != 1 || ns[0].PeerAddr != r.PeerAddr || ns[0].GCHeld != r.GCHeld ||
		ns[0].HFCacheFree != 5 || ns[0].HFCacheTotal != 9 {
		t.Errorf("n1 after its report on the migrated database: %+v, %v; want its peer address, gc hold and Hugging Face cache room", ns, err)
	}
	c := strings.Repeat("a", 40)
	if _, _, err := db.PutModel(ctx, hubModel("tiny", "org/Tiny", c, "config.json", "model.safetensors"), time.Unix(2, 0)); err != nil {
		t.Errorf("a Hub model on the migrated database: %v", err)
	}
	if got, err := db.Model(ctx, "tiny"); err != nil || got.Hub == nil || got.Hub.Commit != c {
		t.Errorf("Model(tiny) after the migration = %+v, %v", got, err)
	}
}
