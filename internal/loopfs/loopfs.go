// Package loopfs mounts a small real ext4 filesystem on a loop device for
// tests that need a disk that fills: statfs, ENOSPC and fallocate behave
// as they do on a node's cache disk, which no directory under /tmp can
// stand in for. Tests that use it need root, mkfs.ext4 and loop devices;
// Mount skips them otherwise.
package loopfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Mount makes an ext4 filesystem of size MiB in an image file and mounts
// it on a new directory, which it returns. The mount is removed when the
// test ends.
func Mount(t testing.TB, mib int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a loop filesystem needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 is not installed (e2fsprogs)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(mib) << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// No reserved blocks: the test decides what is free, and 1 KiB blocks
	// keep a small filesystem's rounding small.
	if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-b", "1024", "-E", "lazy_itable_init=0,lazy_journal_init=0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", img, err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -o loop (no loop devices here?): %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			// A process of the test still in it: lazily, so the image goes.
			exec.Command("umount", "-l", mnt).Run()
			t.Logf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt
}

// MiB is n mebibytes in bytes.
func MiB(n int) int64 { return int64(n) << 20 }
