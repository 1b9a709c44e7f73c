package fetch

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDiskFree(t *testing.T) {
	dir := t.TempDir()
	free, mount, err := diskFree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free <= 0 {
		t.Errorf("diskFree(%s) = %d bytes free", dir, free)
	}
	if !filepath.IsAbs(mount) || len(mount) > len(dir) || dir[:len(mount)] != mount {
		t.Errorf("mount %q is not an ancestor of %s", mount, dir)
	}
	if _, _, err := diskFree(filepath.Join(dir, "missing")); err == nil {
		t.Error("diskFree of a missing directory succeeded")
	}
}

func TestPreallocate(t *testing.T) {
	fh, err := os.Create(filepath.Join(t.TempDir(), "x.part"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := preallocate(fh, 3<<20); err != nil {
		t.Fatal(err)
	}
	st, err := fh.Stat()
	if err != nil || st.Size() != 3<<20 {
		t.Fatalf("after preallocate: %v %v; want 3 MiB", st, err)
	}
}

func TestRoomForMissingDir(t *testing.T) {
	dir := t.TempDir()
	parent, err := RoomFor(dir)
	if err != nil || parent.Total <= 0 || parent.Free <= 0 {
		t.Fatalf("RoomFor(%s) = %+v, %v; want positive room", dir, parent, err)
	}
	// A cache dir not created yet is on its nearest existing parent.
	child, err := RoomFor(filepath.Join(dir, "not", "yet"))
	if err != nil || child.Total != parent.Total {
		t.Errorf("RoomFor(missing child) = %+v, %v; want the parent's filesystem (total %d)", child, err, parent.Total)
	}
}
