package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCopy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	if _, err := ReadCopy(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadCopy(missing) = %v, want ErrNotExist", err)
	}
	os.WriteFile(path, []byte(`{"coordinator":"http://c","fetched":"2026-01-01T00:00:00Z","models":[{"name":"a","source":"/m/a.gguf"}]}`), 0o644)
	cp, err := ReadCopy(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := cp.Lookup("a"); !ok || m.Source != "/m/a.gguf" {
		t.Errorf("Lookup(a) = %+v, %v", m, ok)
	}
	if _, ok := cp.Lookup("b"); ok {
		t.Error("Lookup(b) found a model that is not there")
	}
	os.WriteFile(path, []byte(`{"models":`), 0o644)
	if _, err := ReadCopy(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadCopy(torn) = %v, want an error naming the file", err)
	}
}

// TestRefreshedTrust: a node's trust follows one catalog forward and never
// moves to another identity or back in generation by reading it.
func TestRefreshedTrust(t *testing.T) {
	cat := func(id string, gen int64) Copy { return Copy{Coordinator: "http://c", CatalogID: id, Generation: gen} }
	first := cat("a", 3).Refreshed(Copy{})
	if first.Distrust() != "" || first.TrustedID != "a" || first.TrustedGeneration != 3 {
		t.Fatalf("first catalog: %+v, %q", first, first.Distrust())
	}
	later := cat("a", 5).Refreshed(first)
	if later.Distrust() != "" || later.TrustedGeneration != 5 {
		t.Errorf("later generation: %+v, %q", later, later.Distrust())
	}
	back := cat("a", 4).Refreshed(later)
	if !strings.Contains(back.Distrust(), "generation 4, older than generation 5") {
		t.Errorf("older generation: %q", back.Distrust())
	}
	other := cat("b", 9).Refreshed(back)
	if !strings.Contains(other.Distrust(), "identity b, not a") || other.TrustedID != "a" {
		t.Errorf("another identity: %+v, %q", other, other.Distrust())
	}
	if forced := other.Trusted(); forced.Distrust() != "" || cat("b", 9).Refreshed(forced).Distrust() != "" {
		t.Errorf("after a forced gc the catalog is trusted: %+v", forced)
	}
	if none := (Copy{}).Refreshed(later); !strings.Contains(none.Distrust(), "identity none") {
		t.Errorf("a catalog without identity after one with: %q", none.Distrust())
	}
}
