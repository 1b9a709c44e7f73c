package nodeconf

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestResolved(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.toml")
	os.WriteFile(file, []byte("cache_dir = \"/c\"\n"), 0o644)
	cfg := Agent{CacheDir: "/c"}.WithDefaults()

	id, err := StatFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadResolved(file, "v1"); !errors.Is(err, ErrNoResolved) {
		t.Fatalf("before any copy: %v, want ErrNoResolved", err)
	}
	if err := WriteResolved(file, id, "v1", cfg); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResolved(file, "v1")
	if err != nil || !reflect.DeepEqual(got, cfg) {
		t.Fatalf("ReadResolved = %+v, %v; want %+v", got, err, cfg)
	}
	if _, err := ReadResolved(file, "v2"); !errors.Is(err, ErrNoResolved) {
		t.Errorf("another build: %v, want ErrNoResolved", err)
	}

	// An edit, even one that keeps the size, makes the copy stale.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(file, []byte("cache_dir = \"/d\"\n"), 0o644)
	if _, err := ReadResolved(file, "v1"); !errors.Is(err, ErrNoResolved) {
		t.Errorf("after an edit: %v, want ErrNoResolved", err)
	}
	// A copy of a load that raced with an edit is not written.
	if err := WriteResolved(file, id, "v1", cfg); err == nil {
		t.Error("WriteResolved with the identity from before an edit succeeded")
	}
	// A copy owned by someone other than the file's owner is not trusted.
	id, _ = StatFile(file)
	WriteResolved(file, id, "v1", cfg)
	if os.Geteuid() == 0 {
		os.Chown(ResolvedPath(file), 4242, 4242)
		if _, err := ReadResolved(file, "v1"); !errors.Is(err, ErrNoResolved) {
			t.Errorf("a copy owned by another user: %v, want ErrNoResolved", err)
		}
	}
	// No file: the error says so (the hook then uses the defaults, as the
	// loader would, when the file is the built-in default).
	if _, err := ReadResolved(filepath.Join(dir, "none.toml"), "v1"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}
