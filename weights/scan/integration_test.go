//go:build integration

package scan

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/fusetest"
	"github.com/llmgw/llmgw/weights/catalog"
)

// These tests mount a real FUSE filesystem (Debian's bindfs), so statfs
// answers as it does on a filer, and then make it stop answering, as a dead
// NFS server does. They need root and bindfs:
//
//	apt-get install bindfs fuse3
//	sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run Scan -v ./weights/scan/

func needBindfs(t *testing.T) { fusetest.Need(t) }

// mountBindfs mounts src on mnt with bindfs in the foreground, so the test
// holds its process (to stop it), and unmounts it when the test ends.
func mountBindfs(t *testing.T, src, mnt string) *os.Process { return fusetest.Mount(t, src, mnt) }

func TestScanIntegrationSharedFUSE(t *testing.T) {
	needBindfs(t)
	src, outer := t.TempDir(), t.TempDir()
	testFile(t, src+"/llama/model.safetensors", 1<<30)
	testFile(t, src+"/qwen.gguf", 100)
	// A filer mounted inside a local weights directory: the mount point is
	// judged by its own filesystem, not its parent's.
	mnt := outer + "/filer"
	testMkdir(t, mnt)
	testFile(t, outer+"/local.gguf", 27)
	// And a local link into the filer counts as shared too.
	testLink(t, mnt+"/qwen.gguf", outer+"/linked.gguf")
	mountBindfs(t, src, mnt)

	inv := Scan(context.Background(), []string{src, mnt, outer}, Options{})
	dirs := map[string]Dir{}
	for _, d := range inv.Dirs {
		dirs[d.Path] = d
	}
	if d := dirs[src]; d.Shared || d.Err != "" || d.FSType == "fuse" {
		t.Errorf("Scan(%s) = %+v, want local", src, d)
	}
	if d := dirs[mnt]; !d.Shared || d.Err != "" || d.FSType != "fuse" {
		t.Errorf("Scan(bindfs mount) = %+v, want shared fuse", d)
	}
	want := map[string]bool{
		src + "/llama":         false,
		src + "/qwen.gguf":     false,
		mnt + "/llama":         true,
		mnt + "/qwen.gguf":     true,
		outer + "/filer":       true,
		outer + "/local.gguf":  false,
		outer + "/linked.gguf": true,
	}
	got := map[string]bool{}
	for _, l := range inv.Weights {
		got[l.Path] = l.Shared
		if !l.Complete {
			t.Errorf("Scan: %s incomplete: %s", l.Path, l.Problem)
		}
	}
	for p, shared := range want {
		if g, ok := got[p]; !ok || g != shared {
			t.Errorf("Scan: %s shared = %v (reported %v), want %v", p, g, ok, shared)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Scan reported %d weights, want %d: %+v", len(got), len(want), inv.Weights)
	}
}

// proveHung checks that a stat of p does not return: the mount really
// hangs before anything is tested against it. The channel gets the stat's
// error once the mount answers again.
func proveHung(t *testing.T, p string) chan error {
	t.Helper()
	probe := make(chan error, 1)
	go func() { _, err := os.Stat(p); probe <- err }()
	select {
	case err := <-probe:
		t.Fatalf("stat on a stopped bindfs returned (%v): this is not a hung mount", err)
	case <-time.After(500 * time.Millisecond):
	}
	return probe
}

func TestScanIntegrationHungMount(t *testing.T) {
	needBindfs(t)
	src, mnt, local := t.TempDir(), t.TempDir(), t.TempDir()
	testFile(t, src+"/model.gguf", 30)
	testFile(t, local+"/here.gguf", 40)
	proc := mountBindfs(t, src, mnt)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	t.Cleanup(func() {
		if !continued {
			proc.Signal(syscall.SIGCONT)
		}
	})

	probe := proveHung(t, mnt+"/model.gguf")

	opt := Options{DirTimeout: time.Second}
	start := time.Now()
	inv := Scan(context.Background(), []string{mnt, local}, opt)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Scan with a hung mount took %s, want about DirTimeout (1s)", took)
	}
	if d := inv.Dirs[0]; !strings.Contains(d.Err, "not answering after 1s") {
		t.Errorf("Scan(hung mount) = %+v, want a not-answering error", d)
	}
	if len(inv.Weights) != 1 || inv.Weights[0].Path != local+"/here.gguf" {
		t.Errorf("Scan beside a hung mount = %+v, want the local model", inv.Weights)
	}

	// Scanning again and again does not pile goroutines onto the mount.
	before := runtime.NumGoroutine()
	for range 20 {
		inv = Scan(context.Background(), []string{mnt}, opt)
		if d := inv.Dirs[0]; !strings.Contains(d.Err, "still not answering") {
			t.Fatalf("Scan(still hung) = %+v, want still-not-answering", d)
		}
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines grew from %d to %d over 20 scans of a hung mount", before, after)
	}

	// The filer answers again: the stuck read returns and the next scan is clean.
	proc.Signal(syscall.SIGCONT)
	continued = true
	<-probe
	deadline := time.Now().Add(10 * time.Second)
	for {
		inflight.Lock()
		_, running := inflight.m[mnt]
		inflight.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck scan did not return after the mount answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	inv = Scan(context.Background(), []string{mnt}, opt)
	if d := inv.Dirs[0]; d.Err != "" || !d.Shared {
		t.Errorf("Scan(recovered mount) = %+v, want a clean shared scan", d)
	}
	if len(inv.Weights) != 1 || inv.Weights[0].Path != filepath.Join(mnt, "model.gguf") {
		t.Errorf("Scan(recovered mount) = %+v, want its model", inv.Weights)
	}
}

func TestScanIntegration100kEntries(t *testing.T) {
	testManyEntries(t, 100_000)
}

// A filer mounted as one entry of a weights directory stops answering: the
// models beside it are still reported, and only it is reported as not
// answering (issue 15 item 13: a timeout loses only the entry that timed
// out).
func TestScanIntegrationHungEntry(t *testing.T) {
	needBindfs(t)
	src, w := t.TempDir(), t.TempDir()
	testFile(t, src+"/remote.gguf", 30)
	testFile(t, w+"/local.gguf", 40)
	testFile(t, w+"/llama/model.safetensors", 50)
	mnt := w + "/filer"
	testMkdir(t, mnt)
	// A link into the filer: resolving it hangs too, and must not hold up
	// the entries listed after it.
	testLink(t, mnt+"/remote.gguf", w+"/a-linked.gguf")
	proc := mountBindfs(t, src, mnt)
	fusetest.Stop(t, proc)

	proveHung(t, mnt+"/remote.gguf")

	inv := Scan(context.Background(), []string{w}, Options{DirTimeout: time.Second})
	d := inv.Dirs[0]
	if !strings.Contains(d.Err, mnt) || !strings.Contains(d.Err, "not answering after 1s") {
		t.Errorf("Scan(dir with a hung entry).Err = %q, want it to name %s as not answering after 1s", d.Err, mnt)
	}
	got := map[string]Local{}
	for _, l := range inv.Weights {
		got[l.Path] = l
	}
	for _, p := range []string{w + "/local.gguf", w + "/llama"} {
		if l, ok := got[p]; !ok || !l.Complete {
			t.Errorf("Scan beside a hung entry: %s = %+v (reported %v), want it complete", p, l, ok)
		}
	}
	for _, p := range []string{mnt, w + "/a-linked.gguf"} {
		if l, ok := got[p]; !ok || l.Complete || !strings.Contains(l.Problem, "not answering after 1s") {
			t.Errorf("Scan: hung entry %s = %+v (reported %v), want incomplete, not answering after 1s", p, l, ok)
		}
	}
	if len(got) != 4 {
		t.Errorf("Scan reported %d weights, want 4: %+v", len(got), inv.Weights)
	}
}

// TestScanIntegrationHubReadOnlyRefs: a snapshot of a Hub model's commit in
// a read-only Hugging Face cache (a site's shared cache, mounted read-only
// on the nodes) whose refs/main names another commit is not held: an
// engine given the repository id there loads that other commit, and the
// Prolog cannot point refs/main back, so every job sent there failed while
// placement preferred the node. The same snapshot in a cache the node can
// write is held: the Prolog points refs/main at the commit.
func TestScanIntegrationHubReadOnlyRefs(t *testing.T) {
	needBindfs(t)
	src, mnt := t.TempDir(), t.TempDir()
	commit, other := strings.Repeat("c", 40), strings.Repeat("d", 40)
	testHF(t, src, "org/tiny", commit, map[string]int64{"model.safetensors": 4096, "config.json": 20})
	testWrite(t, filepath.Join(src, "models--org--tiny", "refs", "main"), other)
	fusetest.Mount(t, src, mnt, "ro")
	h := catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit, Files: []catalog.HubFile{
		{Path: "config.json", Size: 20, Blob: strings.Repeat("b", 40)}, {Path: "model.safetensors", Size: 4096, SHA256: strings.Repeat("a", 64)}}}
	opt := Options{Hub: map[string]catalog.Hub{HubKey(h.Repo, h.Commit): h}}
	for dir, wantHeld := range map[string]bool{mnt: false, src: true} {
		inv := Scan(context.Background(), []string{dir}, opt)
		if len(inv.Weights) != 1 {
			t.Fatalf("%s: %+v", dir, inv.Weights)
		}
		l := inv.Weights[0]
		if l.Complete != wantHeld {
			t.Errorf("%s: complete %v (%s); want %v", dir, l.Complete, l.Problem, wantHeld)
		}
		if !wantHeld && (!strings.Contains(l.Problem, "refs/main names "+other) || !strings.Contains(l.Problem, "read-only")) {
			t.Errorf("%s: problem %q; want it to say refs/main names %s on a read-only cache", dir, l.Problem, other)
		}
	}
}
