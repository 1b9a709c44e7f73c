package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

func hubModel(name, repo, commit string, files ...string) api.Model {
	h := &catalog.Hub{Repo: repo, Revision: "main", Commit: commit, Include: []string{"*.py"}}
	for i, f := range files {
		hf := catalog.HubFile{Path: f, Size: int64(10 + i)}
		if strings.HasSuffix(f, ".safetensors") {
			hf.SHA256 = fmt.Sprintf("%064x", i+1)
		} else {
			hf.Blob = fmt.Sprintf("%040x", i+1)
		}
		h.Files = append(h.Files, hf)
	}
	return api.Model{Name: name, Source: catalog.HubSource(repo, commit), Size: catalog.HubSize(*h), Hub: h}
}

// A Hub model on a database made before them: stored and read back whole;
// its repository is one model (whatever the case it is spelt in); a pin is
// never recorded for it; a snapshot of its commit, wherever a node found
// it, is the model, and a repin to another commit moves that to the new
// commit's snapshot at once.
func TestHubModels(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// Back to the released schema (undoLater undoes every migration after
	// 0008, 0009 included), which open migrates again, 0010 among them.
	if _, err := db.cw().ExecContext(ctx, fmt.Sprintf(undoLater+`PRAGMA user_version = %d`, releasedMigrations)); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpenPath(t, path)

	c1, c2 := strings.Repeat("a", 40), strings.Repeat("b", 40)
	m := hubModel("tiny", "org/Tiny", c1, "config.json", "model.safetensors")
	if _, _, err := db.PutModel(ctx, m, t0); err != nil {
		t.Fatal(err)
	}
	got, err := db.Model(ctx, "tiny")
	if err != nil || !reflect.DeepEqual(got.Hub, m.Hub) || got.Source != m.Source || got.Pinned != "" {
		t.Fatalf("Model(tiny) = %+v (%+v), %v; want %+v", got, got.Hub, err, m.Hub)
	}
	all, err := db.Models(ctx)
	if err != nil || len(all) != 1 || !reflect.DeepEqual(all[0].Hub, m.Hub) {
		t.Fatalf("Models = %+v, %v", all, err)
	}
	other := hubModel("tiny2", "ORG/tiny", c2, "model.safetensors")
	if _, _, err := db.PutModel(ctx, other, t0); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "repository ORG/tiny is already model tiny") {
		t.Errorf("a second model of the repository: %v; want a conflict naming tiny", err)
	}
	if got, err := db.Pin(ctx, m.Source, strings.Repeat("c", 64), "", "n1", t0); err != nil || got.Pinned != "" {
		t.Errorf("a pin of a Hub model: %+v, %v; want none recorded", got, err)
	}

	// Presence: the node's scan reports the snapshot with its repository
	// and commit; one of another commit is not this model.
	w := func(commit string) api.Weight {
		return api.Weight{Path: "/shared/hf/models--org--Tiny/snapshots/" + commit, Size: 21, Shared: true, Complete: true, ModelID: "org/Tiny", Revision: commit}
	}
	r := report("n1", 1, w(c1), w(c2))
	r.Cache.Dir = "/cache"
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil {
		t.Fatal(err)
	}
	models := func() map[string]string {
		ps, err := db.NodePresence(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range ps {
			out[p.Revision] = p.Model
		}
		return out
	}
	if got := models(); got[c1] != "tiny" || got[c2] != "" {
		t.Errorf("presence: %v; want the snapshot of %s alone to be tiny", got, c1)
	}
	// A repin: the model moves to the new commit, and its presence with it.
	m2 := hubModel("tiny", "org/Tiny", c2, "config.json", "model.safetensors")
	if _, _, err := db.PutModel(ctx, m2, t0); err != nil {
		t.Fatal(err)
	}
	if got := models(); got[c1] != "" || got[c2] != "tiny" {
		t.Errorf("presence after the repin: %v; want the snapshot of %s to be tiny", got, c2)
	}
	// Removed, its rows go with it.
	if err := db.DeleteModel(ctx, "tiny"); err != nil {
		t.Fatal(err)
	}
	var n int
	db.cr().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM catalog_hub) + (SELECT count(*) FROM catalog_hub_files)`).Scan(&n)
	if n != 0 {
		t.Errorf("%d Hub rows left after the model was removed", n)
	}
	// Made again as a model of one file, it keeps no Hub.
	if _, _, err := db.PutModel(ctx, hubModel("x", "o/r", c1, "model.safetensors"), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "x", Source: "https://o.example/w.gguf"}, t0); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Model(ctx, "x"); got.Hub != nil {
		t.Errorf("a Hub model made a plain one keeps its Hub: %+v", got.Hub)
	}
}

// models mv of a Hub model: the entry keeps its repository, commit and
// file list under the new name, so every node's catalog copy still names
// the snapshot it holds (the Prolog's fast path finds it, gc keeps it);
// the snapshot a node reported is the new name's at once; the repository
// is still one model. Before, the rename moved the catalog row alone and
// the Hub rows, which name the entry, either broke the rename's foreign
// keys or were left behind.
func TestRenameHubModel(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	c1 := strings.Repeat("a", 40)
	m := hubModel("tiny", "org/Tiny", c1, "config.json", "model.safetensors")
	if _, _, err := db.PutModel(ctx, m, t0); err != nil {
		t.Fatal(err)
	}
	w := api.Weight{Path: "/cache/hub/models--org--Tiny/snapshots/" + c1, Size: 21, Complete: true, ModelID: "org/Tiny", Revision: c1}
	r := report("n1", 1, w)
	r.Cache.Dir = "/cache"
	if _, err := db.Ingest(ctx, []*api.Report{r}, t0); err != nil {
		t.Fatal(err)
	}

	got, err := db.RenameModel(ctx, "tiny", "tiny-chat", t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("RenameModel of a Hub model: %v", err)
	}
	if got.Name != "tiny-chat" || !reflect.DeepEqual(got.Hub, m.Hub) || got.Source != m.Source {
		t.Errorf("RenameModel returned %+v (Hub %+v); want tiny-chat with the same Hub", got, got.Hub)
	}
	if got, err := db.Model(ctx, "tiny-chat"); err != nil || !reflect.DeepEqual(got.Hub, m.Hub) {
		t.Errorf("Model(tiny-chat) after the rename = %+v (Hub %+v), %v; want its Hub kept", got, got.Hub, err)
	}
	if _, err := db.Model(ctx, "tiny"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Model(tiny) after the rename: %v; want not found", err)
	}
	all, err := db.Models(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "tiny-chat" || !reflect.DeepEqual(all[0].Hub, m.Hub) {
		t.Errorf("Models after the rename = %+v, %v", all, err)
	}
	var stale int
	db.cr().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM catalog_hub WHERE name = 'tiny') + (SELECT count(*) FROM catalog_hub_files WHERE name = 'tiny')`).Scan(&stale)
	if stale != 0 {
		t.Errorf("%d Hub rows left under the old name", stale)
	}
	ps, err := db.NodePresence(ctx, "n1")
	if err != nil || len(ps) != 1 || ps[0].Model != "tiny-chat" {
		t.Errorf("the node's snapshot after the rename: %+v, %v; want it held as tiny-chat without a new report", ps, err)
	}
	if _, _, err := db.PutModel(ctx, hubModel("again", "org/tiny", c1, "model.safetensors"), t0); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already model tiny-chat") {
		t.Errorf("a second model of the renamed repository: %v; want a conflict naming tiny-chat", err)
	}
}
