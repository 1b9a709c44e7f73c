package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// TestChunkSums: a file's digest list is recorded once (a later list never
// replaces it), read back after the database is opened again, and goes with
// the pin (repin) and with the catalog entry; a model that does not name
// the file records nothing.
func TestChunkSums(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	const src, sha = "https://example.org/w.gguf", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: src, SHA256: sha, Size: 3 << 20}, t0); err != nil {
		t.Fatal(err)
	}
	list := func(b byte) []string {
		return []string{fmt.Sprintf("%02x%062x", b, 1), fmt.Sprintf("%02x%062x", b, 2), fmt.Sprintf("%02x%062x", b, 3)}
	}
	got, err := db.RecordChunkSums(ctx, "m", src, sha, 3<<20, 1<<20, list(1), []string{"n1", "n2"}, t0)
	if err != nil || !slices.Equal(got, list(1)) {
		t.Fatalf("record: %q, %v", got, err)
	}
	if got, err := db.RecordChunkSums(ctx, "m", src, sha, 3<<20, 1<<20, list(2), []string{"n3", "n4"}, t0); err != nil || !slices.Equal(got, list(1)) {
		t.Errorf("a second list: %q, %v; want the first kept", got, err)
	}
	if _, err := db.RecordChunkSums(ctx, "m", src, sha, 3<<20, 1<<20, list(1)[:2], nil, t0); err == nil {
		t.Errorf("two digests for three chunks were taken")
	}
	if _, err := db.RecordChunkSums(ctx, "other", src, sha, 3<<20, 1<<20, list(1), nil, t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("a model that is no entry: %v, want ErrNotFound", err)
	}
	db.Close()
	db = mustOpenPath(t, path)
	if got, err := db.ChunkSums(ctx, src, sha, 1<<20); err != nil || !slices.Equal(got, list(1)) {
		t.Errorf("after reopening: %q, %v", got, err)
	}
	if got, _ := db.ChunkSums(ctx, src, sha, 2<<20); got != nil {
		t.Errorf("another chunk size: %q, want none", got)
	}
	if err := db.Unpin(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ChunkSums(ctx, src, sha, 1<<20); got != nil {
		t.Errorf("after a repin: %q, want none", got)
	}
	if _, err := db.RecordChunkSums(ctx, "m", src, sha, 3<<20, 1<<20, list(3), nil, t0); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ChunkSums(ctx, src, sha, 1<<20); got != nil {
		t.Errorf("after the entry went: %q, want none", got)
	}
}

// TestPeerAddrKept: a node's chunk server address is stored with it, so a
// restarted coordinator offers it as a peer before its next report.
func TestPeerAddrKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db := mustOpenPath(t, path)
	r := &api.Report{ID: "r1", Seq: 1, Started: t0, Time: t0, Node: "n1", Fabric: "ib-a", Looked: true, PeerAddr: "10.1.0.1:8421"}
	if _, err := db.IngestBatch(ctx, []Incoming{{Report: r}}, t0); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpenPath(t, path)
	nodes, err := db.Nodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].PeerAddr != "10.1.0.1:8421" {
		t.Fatalf("nodes after reopening: %+v, %v", nodes, err)
	}
}
