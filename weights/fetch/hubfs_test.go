package fetch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestHubModelSymlinkTricks: a Hugging Face cache that users can write (a
// site's shared cache, often world-writable so that everyone's downloads
// land in it) may hold links a user planted. Root fetching into it must
// write only inside it and never through one of them: not through a blobs
// directory, a snapshot or a subfolder of one, or a refs directory that
// leads elsewhere, nor through a temporary or partial file's name. The
// victim outside the cache keeps its bytes, and its directory stays
// empty, whether the fetch then fails (saying which link) or succeeds.
// Both with the Hugging Face cache on the llmgw cache's filesystem and on
// another one (where blobs are copied in).
func TestHubModelSymlinkTricks(t *testing.T) {
	host, _ := os.Hostname()
	for _, fsys := range []string{"same filesystem", "other filesystem"} {
		for _, tc := range []struct {
			name  string
			plant func(t *testing.T, repoDir string, hb catalog.Hub, victimDir, victimFile string)
		}{
			{"blobs directory", func(t *testing.T, repoDir string, _ catalog.Hub, victimDir, _ string) {
				mustSymlink(t, victimDir, filepath.Join(repoDir, "blobs"))
			}},
			{"snapshot directory", func(t *testing.T, repoDir string, hb catalog.Hub, victimDir, _ string) {
				mustSymlink(t, victimDir, filepath.Join(repoDir, "snapshots", hb.Commit))
			}},
			{"snapshot subfolder", func(t *testing.T, repoDir string, hb catalog.Hub, victimDir, _ string) {
				mustSymlink(t, victimDir, filepath.Join(repoDir, "snapshots", hb.Commit, "additional_chat_templates"))
			}},
			{"refs directory", func(t *testing.T, repoDir string, _ catalog.Hub, victimDir, _ string) {
				mustSymlink(t, victimDir, filepath.Join(repoDir, "refs"))
			}},
			{"ref file", func(t *testing.T, repoDir string, _ catalog.Hub, _, victimFile string) {
				mustSymlink(t, victimFile, filepath.Join(repoDir, "refs", "main"))
			}},
			{"partial blob", func(t *testing.T, repoDir string, hb catalog.Hub, _, victimFile string) {
				for _, f := range hb.Files {
					mustSymlink(t, victimFile, filepath.Join(repoDir, "blobs", f.BlobName()+catalog.PartSuffix))
				}
			}},
			{"temporary blob", func(t *testing.T, repoDir string, hb catalog.Hub, _, victimFile string) {
				// The name a copy into another filesystem used: guessable.
				for _, f := range hb.Files {
					mustSymlink(t, victimFile, filepath.Join(repoDir, "blobs", "."+f.BlobName()+"."+host+"."+strconv.Itoa(os.Getpid())+".tmp"))
				}
			}},
			{"temporary link", func(t *testing.T, repoDir string, hb catalog.Hub, _, victimFile string) {
				mustSymlink(t, victimFile, filepath.Join(repoDir, "snapshots", hb.Commit, ".config.json.llmgw-"+strconv.Itoa(os.Getpid())+".tmp"))
			}},
		} {
			t.Run(fsys+"/"+tc.name, func(t *testing.T) {
				x := newHubFixture(t)
				if fsys == "other filesystem" {
					x.cache = otherFS(t, x.f.CacheDir)
				}
				x.h.Commit("org/tiny", "main", tinyRepo())
				hb := x.model(t, "org/tiny")
				victimDir := filepath.Join(t.TempDir(), "victim")
				victimFile := filepath.Join(victimDir, "precious")
				if err := os.MkdirAll(victimDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(victimFile, []byte("precious"), 0o644); err != nil {
					t.Fatal(err)
				}
				repoDir := catalog.HubRepoDir(x.cache, hb.Repo)
				tc.plant(t, repoDir, hb, victimDir, victimFile)

				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := x.f.EnsureHub(ctx, x.cache, hb)
				if b, _ := os.ReadFile(victimFile); string(b) != "precious" {
					t.Errorf("the file a planted link leads to was written: %d bytes now", len(b))
				}
				if ents, _ := os.ReadDir(victimDir); len(ents) != 1 {
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					t.Errorf("the directory a planted link leads to holds %v; want only the victim's file", names)
				}
				if err != nil && !strings.Contains(err.Error(), "link") {
					t.Errorf("EnsureHub = %v; a refusal must say it met a link", err)
				}
			})
		}
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// otherFS is a directory on another filesystem than dir (/dev/shm), or
// skips the test.
func otherFS(t *testing.T, dir string) string {
	t.Helper()
	other, err := os.MkdirTemp("/dev/shm", "llmgw-hf-")
	if err != nil {
		t.Skipf("no /dev/shm for a second filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if sameFS(other, dir) {
		t.Skip("/dev/shm is on the same filesystem as the test's cache")
	}
	return other
}

func sameFS(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// TestHubModelTwoProcessesOneFetch: two processes of one node filling the
// same model at once (two Prologs with no agent, or an old agent beside a
// Prolog) read each file from the Hub once between them, the second
// finding the blob the first moved into place, on the llmgw cache's
// filesystem as on another one.
func TestHubModelTwoProcessesOneFetch(t *testing.T) {
	for _, fsys := range []string{"same filesystem", "other filesystem"} {
		t.Run(fsys, func(t *testing.T) {
			x := newHubFixture(t)
			if fsys == "other filesystem" {
				x.cache = otherFS(t, x.f.CacheDir)
			}
			x.h.Commit("org/tiny", "main", tinyRepo())
			hb := x.model(t, "org/tiny")
			x.h.Throttle(2 << 20) // long enough for the two to overlap
			second := &Fetcher{CacheDir: x.f.CacheDir, LockDir: x.f.LockDir, IdleTimeout: x.f.IdleTimeout,
				RetryWait: x.f.RetryWait, Retries: x.f.Retries, HFEndpoint: x.f.HFEndpoint}
			errs := make(chan error, 2)
			for _, f := range []*Fetcher{x.f, second} {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := f.EnsureHub(ctx, x.cache, hb)
					errs <- err
				}()
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if got, want := x.h.Served(), catalog.HubSize(hb); got != want {
				t.Errorf("the Hub served %d bytes for a model of %d: a file was fetched twice", got, want)
			}
		})
	}
}
