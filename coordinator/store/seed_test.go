package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestSeedRequestLifecycle: a seed request survives a reopen of the file
// (a coordinator restart) with its asks still pending, a node handed and
// done leaves the pending set, a held node is never pending, and the
// deadline ends it.
func TestSeedRequestLifecycle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	st := api.SeedStatus{ID: "s1", Model: "m", Fabric: "ib-a", Copies: 3, Created: t0, Deadline: t0.Add(time.Hour),
		Note: "a note", Nodes: []api.SeedNode{{Node: "n1", State: api.SeedHeld}, {Node: "n2", State: api.SeedAsked}, {Node: "n3", State: api.SeedAsked}}}
	if err := db.CreateSeed(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateSeed(ctx, st); err == nil {
		t.Error("a second request with the same id was stored")
	}
	if err := db.HandSeed(ctx, "s1", "n1", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("HandSeed(held node) = %v, want ErrNotFound: a node that held it was never asked", err)
	}
	if err := db.HandSeed(ctx, "s1", "n9", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("HandSeed(node not named) = %v, want ErrNotFound", err)
	}
	if err := db.HandSeed(ctx, "s1", "n2", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Handed again at the next report: the first time is kept.
	if err := db.HandSeed(ctx, "s1", "n2", t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = mustOpenPath(t, path)
	pend, err := db.PendingSeeds(ctx, t0.Add(10*time.Second))
	if err != nil || len(pend) != 1 || len(pend[0].Nodes) != 2 || pend[0].Nodes[0].Node != "n2" || pend[0].Nodes[1].Node != "n3" {
		t.Fatalf("PendingSeeds after reopening = %+v, %v; want s1 asking n2 and n3", pend, err)
	}
	if p := pend[0]; p.Model != "m" || p.Fabric != "ib-a" || p.Copies != 3 || !p.Deadline.Equal(t0.Add(time.Hour)) ||
		!p.Nodes[0].Handed.Equal(t0.Add(time.Second)) || !p.Nodes[1].Handed.IsZero() {
		t.Errorf("PendingSeeds = %+v", p)
	}
	if err := db.DoneSeed(ctx, "s1", "n2", t0.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	pend, _ = db.PendingSeeds(ctx, t0.Add(30*time.Second))
	if len(pend) != 1 || len(pend[0].Nodes) != 1 || pend[0].Nodes[0].Node != "n3" {
		t.Errorf("PendingSeeds after n2 is done = %+v, want only n3", pend)
	}
	if pend, _ := db.PendingSeeds(ctx, t0.Add(time.Hour)); len(pend) != 0 {
		t.Errorf("PendingSeeds at the deadline = %+v, want none", pend)
	}
	got, err := db.Seed(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"n1 held", "n2 done", "n3 asked"}
	if len(got.Nodes) != 3 || got.Note != "a note" {
		t.Fatalf("Seed = %+v", got)
	}
	for i, n := range got.Nodes {
		if s := n.Node + " " + n.State; s != want[i] {
			t.Errorf("node %d: %s, want %s", i, s, want[i])
		}
	}
	if !got.Nodes[1].Done.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("n2 done at %v", got.Nodes[1].Done)
	}
	if _, err := db.Seed(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Seed(nope) = %v, want ErrNotFound", err)
	}
}

// TestSeedRequestsBounded: requests older than a week go, and of the rest
// only the newest seedKeepMax are kept, whatever a script asks.
func TestSeedRequestsBounded(t *testing.T) {
	ctx := context.Background()
	db := mustOpenPath(t, filepath.Join(t.TempDir(), "c.db"))
	mk := func(id string, at time.Time) {
		t.Helper()
		if err := db.CreateSeed(ctx, api.SeedStatus{ID: id, Model: "m", Fabric: "f", Copies: 1, Created: at,
			Deadline: at.Add(time.Hour), Nodes: []api.SeedNode{{Node: "n1", State: api.SeedAsked}}}); err != nil {
			t.Fatal(err)
		}
	}
	mk("old", t0.Add(-8*24*time.Hour))
	mk("first", t0)
	if _, err := db.Seed(ctx, "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a request over a week old is still kept: %v", err)
	}
	for i := range seedKeepMax {
		mk(fmt.Sprintf("r%04d", i), t0.Add(time.Duration(i+1)*time.Second))
	}
	if _, err := db.Seed(ctx, "first"); !errors.Is(err, ErrNotFound) {
		t.Errorf("request 'first' is kept beyond the newest %d: %v", seedKeepMax, err)
	}
	var n, asks int
	db.cr().QueryRowContext(ctx, `SELECT count(*) FROM seed_requests`).Scan(&n)
	db.cr().QueryRowContext(ctx, `SELECT count(*) FROM seed_asks`).Scan(&asks)
	if n != seedKeepMax || asks != seedKeepMax {
		t.Errorf("%d requests and %d asks kept, want %d each", n, asks, seedKeepMax)
	}
}

// seedMigration is the number of the migration that makes the seed tables
// (migrations/0008_seed_requests.sql).
const seedMigration = 8

// A database made before seed requests gets their tables on open, and keeps
// its catalog.
func TestSeedMigratesAnOlderDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "https://example.org/w.gguf"}, t0); err != nil {
		t.Fatal(err)
	}
	// Back to before the seed migration: its tables go, and those of
	// every later one (undoLater), which open makes again.
	if _, err := db.cw().ExecContext(ctx, fmt.Sprintf(undoLater+`DROP TABLE seed_asks; DROP TABLE seed_requests; PRAGMA user_version = %d`, seedMigration-1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpenPath(t, path)
	if err := db.CreateSeed(ctx, api.SeedStatus{ID: "s", Model: "m", Fabric: "f", Copies: 1, Created: t0, Deadline: t0.Add(time.Hour),
		Nodes: []api.SeedNode{{Node: "n1", State: api.SeedAsked}}}); err != nil {
		t.Fatalf("seed request on a migrated database: %v", err)
	}
	if ms, err := db.Models(ctx); err != nil || len(ms) != 1 {
		t.Errorf("catalog after the migration: %+v, %v", ms, err)
	}
}
