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

	"github.com/llmgw/llmgw/weights/catalog"
)

// fetchTinyDisk mounts a 1 MiB tmpfs for the cache: a real full disk, with
// real statfs answers and real ENOSPC, which no unit test can fake. Needs
// root:
//
//	sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run Fetch ./weights/fetch/
func fetchTinyDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root: run 'sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run Fetch ./weights/fetch/' or 'make integration'")
	}
	mnt := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
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
		say      string
	}{
		// The origin announces 2 MiB: refused before the download.
		{"announced size", false, "needs 2.1 MB, 1.0 MB free on " + mnt},
		// No length: the disk fills during the fetch.
		{"ENOSPC during the fetch", true, "the disk filled during the fetch, 0 B free on " + mnt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFakeOrigin(t, 2<<20)
			o.noLength = tc.noLength
			f := testFetcher(t)
			f.CacheDir = filepath.Join(mnt, tc.name)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := f.Ensure(ctx, o.url(), Want{})
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), tc.say) || !strings.Contains(err.Error(), o.url()) {
				t.Fatalf("Ensure on a 1 MiB disk = %v; want ErrNoSpace saying %q and naming the source", err, tc.say)
			}
			assertAbsent(t, catalog.CachePathFor(f.CacheDir, o.url()))
			t.Log(err)
		})
	}
}
