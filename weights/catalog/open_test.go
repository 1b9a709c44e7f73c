package catalog

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadRegular(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadRegular(missing) = %v, want ErrNotExist", err)
	}
	for _, n := range []int{0, 1, 511, 512, 513, 70000} {
		want := bytes.Repeat([]byte("x"), n)
		p := filepath.Join(dir, strconv.Itoa(n))
		os.WriteFile(p, want, 0o644)
		if got, err := ReadRegular(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadRegular(%d bytes) = %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := ReadRegular(dir); err == nil {
		t.Error("ReadRegular(a directory) succeeded")
	}
}

// TestCreateTemp: a name left by a dead process of the same id is passed
// over, never reused.
func TestCreateTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "7.json")
	stale := filepath.Join(dir, ".7.json.tmp-"+strconv.Itoa(os.Getpid())+"-0")
	os.WriteFile(stale, []byte("old"), 0o600)
	f, err := createTemp(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Name() == stale || filepath.Dir(f.Name()) != dir {
		t.Errorf("createTemp = %s; want a new name in %s", f.Name(), dir)
	}
	if b, _ := os.ReadFile(stale); string(b) != "old" {
		t.Errorf("createTemp overwrote %s", stale)
	}
	if st, err := f.Stat(); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("createTemp mode %v, %v; want 0600", st.Mode(), err)
	}
}
