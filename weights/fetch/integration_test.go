//go:build integration

package fetch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// fetchTinyDisk mounts a 1 MiB tmpfs for the cache: a real full disk, with
// real statfs answers and real ENOSPC, which no unit test can fake. Needs
// root:
//
//	sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run Fetch ./weights/fetch/
func fetchTinyDisk(t *testing.T) string {
	return fetchDisk(t, "1m")
}

// fetchDisk mounts a tmpfs of the given size (as mount's size= takes it).
func fetchDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root: run 'sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run Fetch ./weights/fetch/' or 'make integration'")
	}
	mnt := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

func TestFetchIntegrationNoSpace(t *testing.T) {
	mnt := fetchTinyDisk(t)
	for _, tc := range []struct {
		name     string
		noLength bool
		reserve  int64
		say      string
	}{
		// The origin announces 2 MiB: refused before the download.
		{"announced size", false, -1, "needs 2.1 MB, 1.0 MB free on " + mnt},
		// No length and no reserve: the disk fills during the fetch.
		{"ENOSPC during the fetch", true, -1, "the disk filled during the fetch, 0 B free on " + mnt},
		// No length, a reserve: the stream stops there, short of ENOSPC,
		// instead of growing into the last blocks.
		{"no length stops at the reserve", true, 512 << 10, mnt + " is down to its cache_reserve of 524 kB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFakeOrigin(t, 2<<20)
			o.noLength = tc.noLength
			f := testFetcher(t)
			f.CacheDir = filepath.Join(mnt, tc.name)
			f.CacheReserve = tc.reserve
			if err := os.Mkdir(f.CacheDir, 0o755); err != nil {
				t.Fatal(err)
			}
			before := bavail(t, mnt)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := f.Ensure(ctx, o.url(), Want{})
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), tc.say) || !strings.Contains(err.Error(), o.url()) {
				t.Fatalf("Ensure on a 1 MiB disk = %v; want ErrNoSpace saying %q and naming the source", err, tc.say)
			}
			assertAbsent(t, catalog.CachePathFor(f.CacheDir, o.url()))
			// A fetch that cannot finish gives its space back: a disk left
			// at 100% breaks every other writer on the node.
			if after := bavail(t, mnt); after != before {
				t.Errorf("free space on %s: %d bytes before the fetch, %d after; the failed fetch must give it back", mnt, before, after)
			}
			t.Log(err)
		})
	}
}

// bavail is the space an unprivileged writer has on the filesystem of dir.
func bavail(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestFetchIntegrationSpaceClaimed: two fetches that each fit but together
// do not, running at once on one small filesystem, as two prologs on a node
// do. The second must be refused for the space the first has claimed (not
// both die at ENOSPC with two .part files and a full disk); the first
// finishes, and the disk holds only its file.
func TestFetchIntegrationSpaceClaimed(t *testing.T) {
	mnt := fetchDisk(t, "3m")
	a, b := newFakeOrigin(t, 2<<20), newFakeOrigin(t, 2<<20)
	a.set(func(o *fakeOrigin) { o.writeDelay = 20 * time.Millisecond })
	b.set(func(o *fakeOrigin) { o.writeDelay = 20 * time.Millisecond })
	locks := t.TempDir()
	newF := func() *Fetcher {
		f := testFetcher(t)
		f.CacheDir, f.LockDir = filepath.Join(mnt, "cache"), locks
		return f
	}
	fa, fb := newF(), newF() // two Fetchers: two processes, one node
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errA := make(chan error, 1)
	go func() { _, err := fa.Ensure(ctx, a.url(), Want{}); errA <- err }()
	waitFor(t, "the first fetch to be under way", func() bool { return a.served.Load() > 0 })
	_, errB := fb.Ensure(ctx, b.url(), Want{})
	if !errors.Is(errB, ErrNoSpace) || !strings.Contains(errB.Error(), "claimed by fetches in flight") {
		t.Errorf("second fetch = %v; want ErrNoSpace for the space the first has claimed", errB)
	}
	if err := <-errA; err != nil {
		t.Fatalf("first fetch = %v; it fits and must finish", err)
	}
	assertFile(t, catalog.CachePathFor(fa.CacheDir, a.url()), a.data)
	assertAbsent(t, catalog.CachePathFor(fb.CacheDir, b.url())+catalog.PartSuffix)
	if free, want := bavail(t, mnt), int64(3<<20)-int64(2<<20); free < want-64<<10 {
		t.Errorf("%d bytes free after, want about %d: only the first file may hold space", free, want)
	}
}
