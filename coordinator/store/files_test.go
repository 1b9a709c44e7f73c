package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// filesMigration is the number of the migration that makes catalog_files
// (migrations/0007_catalog_files.sql).
const filesMigration = 7

func setOf(name string, srcs ...string) api.Model {
	m := api.Model{Name: name, Source: srcs[0]}
	for _, s := range srcs {
		m.Files = append(m.Files, api.File{Source: s})
	}
	return m
}

// A model of several files on a database made before them: its files are
// stored apart, each pinned on its own, a pin kept while its source stays,
// and no file is two models'. Presence of its set directory is the model.
func TestModelOfSeveralFiles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.cw().ExecContext(ctx, fmt.Sprintf(undoLater+`DROP TABLE seed_asks; DROP TABLE seed_requests; DROP TABLE catalog_files; PRAGMA user_version = %d`, filesMigration-1)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpenPath(t, path)

	a, b := "https://o.example/w-00001-of-00002.gguf", "https://o.example/w-00002-of-00002.gguf"
	m := setOf("m", a, b)
	if _, _, err := db.PutModel(ctx, m, t0); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{a, b} {
		if _, _, err := db.PutModel(ctx, api.Model{Name: "x", Source: src}, t0); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "model m") {
			t.Errorf("another model with %s: %v; want a conflict naming m", src, err)
		}
	}
	p1, p2 := strings.Repeat("1", 64), strings.Repeat("2", 64)
	if got, err := db.Pin(ctx, b, p2, `"e"`, "n1", t0); err != nil || got.Name != "m" || got.Files[1].Pinned != p2 || got.Files[0].Pinned != "" {
		t.Fatalf("pin of the second file: %+v, %v", got, err)
	}
	var conflict *PinConflict
	if _, err := db.Pin(ctx, b, p1, "", "n2", t0); !errors.As(err, &conflict) || conflict.Source != b || conflict.Pinned != p2 {
		t.Errorf("other bytes for the second file: %v; want a conflict naming it", err)
	}
	// Re-put with the same sources keeps the pin; the model has none.
	if _, _, err := db.PutModel(ctx, m, t0); err != nil {
		t.Fatal(err)
	}
	got, err := db.Model(ctx, "m")
	if err != nil || len(got.Files) != 2 || got.Files[1].Pinned != p2 || got.Files[1].PinnedETag != `"e"` || got.Pinned != "" || got.Source != a {
		t.Fatalf("model after re-put: %+v, %v", got, err)
	}
	// Presence: the set directory in the node's cache is the model.
	w := api.Weight{Path: "/cache/" + catalog.SetName(got), Size: 10, Complete: true}
	r := report("n1", 1, w)
	r.Cache.Dir = "/cache"
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil {
		t.Fatal(err)
	}
	ps, err := db.NodePresence(ctx, "n1")
	if err != nil || len(ps) != 1 || ps[0].Model != "m" {
		t.Errorf("presence of the set directory: %+v, %v; want model m", ps, err)
	}
	if err := db.Unpin(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Model(ctx, "m"); got.Files[1].Pinned != "" {
		t.Errorf("after repin: %+v; want no pin", got.Files)
	}
	if err := db.DeleteModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "x", Source: b}, t0); err != nil {
		t.Errorf("a file of a removed set as another model's source: %v", err)
	}
	// A set reported before it is added is held from the moment it is.
	later := setOf("later", "https://o.example/l/a.safetensors", "https://o.example/l/config.json")
	r = report("n2", 1, api.Weight{Path: "/cache/" + catalog.SetName(later), Size: 10, Complete: true})
	r.Cache.Dir = "/cache"
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.PutModel(ctx, later, t0); err != nil {
		t.Fatal(err)
	}
	if ps, err := db.NodePresence(ctx, "n2"); err != nil || len(ps) != 1 || ps[0].Model != "later" {
		t.Errorf("presence reported before the set was added: %+v, %v; want model later", ps, err)
	}
}
