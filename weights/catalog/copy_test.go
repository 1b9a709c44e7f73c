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
