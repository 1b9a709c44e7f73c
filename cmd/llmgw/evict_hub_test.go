package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestEvictHubSnapshots: a Hub model in the agent's Hugging Face cache on
// the cache's own disk (120 MiB of ext4, 100 MiB free) under the same
// eviction as every other fetch. Its fetch is claimed whole and, when it
// does not fit, evicts first (here a file no catalog entry wants any
// more); after a repin the old snapshot is superseded and goes for the new
// revision's fetch, its blob with it, but never while a job record names
// it, and the refusal then says so. Before, eviction saw no Hub snapshot
// and a Hub fetch asked nothing of it: each of these fetches was refused
// "not enough disk space" with the room held by what eviction would free.
func TestEvictHubSnapshots(t *testing.T) {
	mnt := loopfs.Mount(t, 120)
	cache := filepath.Join(mnt, "cache")
	os.MkdirAll(cache, 0o755)
	var st unix.Statfs_t
	if err := unix.Statfs(cache, &st); err != nil {
		t.Fatal(err)
	}
	ballast, err := os.Create(filepath.Join(mnt, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(ballast.Fd()), 0, 0, int64(st.Bavail)*st.Bsize-100<<20); err != nil {
		t.Fatal(err)
	}
	ballast.Close()

	e := newEvictEnv(t)
	h := startStandIn(t)
	shards := func(b byte) map[string][]byte {
		return map[string][]byte{"config.json": []byte(`{"model_type":"llama"}`), "model.safetensors": bytes.Repeat([]byte{b}, 60_000_000)}
	}
	a := h.Commit("org/big", "main", shards('a'))
	admin := map[string]string{"LLMGW_COORDINATOR": e.url, "LLMGW_TOKEN_FILE": writeToken(t, "admin-secret"), "HF_ENDPOINT": h.URL}
	if code, out, errs := llmgwRun(t, admin, "models", "add", "big", "hf:org/big"); code != 0 {
		t.Fatalf("models add big hf:org/big: %d %s %s", code, out, errs)
	}
	e.add("u", 50)
	n1a, n1 := e.agentOn("n1", "f1", cache, 100, 90)
	hf := n1a.Config().HFCacheDir()
	copyPath := filepath.Join(e.dir, "n1", "state", "catalog.json")
	waitCommit := func(commit string) {
		pollUntil(t, 10*time.Second, "n1's catalog copy with big at "+commit, func() bool {
			cp, err := catalog.ReadCopy(copyPath)
			m, ok := cp.Lookup("big")
			_, hasU := cp.Lookup("u")
			return err == nil && ok && m.Hub != nil && m.Hub.Commit == commit && !hasU
		})
	}
	backdate := func(dir string) {
		long := unix.NsecToTimespec(time.Now().Add(-time.Hour).UnixNano())
		filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err == nil {
				unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{long, long}, unix.AT_SYMLINK_NOFOLLOW)
			}
			return nil
		})
	}
	ensureHub := func() error {
		ms, err := e.admin.Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var m api.Model
		for _, x := range ms {
			if x.Name == "big" {
				m = x
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err = n1.Ensure(ctx, api.EnsureRequest{Source: m.Source, Hub: m.Hub}, nil)
		return err
	}

	// u fills half the disk, then leaves the catalog: the Hub model's
	// fetch (57 MiB) evicts it.
	uPath, err := e.ensure(n1, "u", 50)
	if err != nil {
		t.Fatal(err)
	}
	backdate(uPath)
	if err := e.admin.DeleteModel(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	waitCommit(a)
	if err := ensureHub(); err != nil {
		t.Fatalf("the Hub model's fetch, which fits once u is evicted: %v", err)
	}
	if _, err := os.Stat(uPath); err == nil {
		t.Error("u is still there: the Hub fetch did not evict")
	}
	snapA := catalog.HubSnapshotDir(hf, "org/big", a)

	// A repin: the new revision (57 MiB more) fits only without the old.
	b := h.Commit("org/big", "main", shards('b'))
	if code, out, errs := llmgwRun(t, admin, "models", "repin", "big"); code != 0 || !strings.Contains(out+errs, b[:12]) {
		t.Fatalf("models repin big: %d %s %s", code, out, errs)
	}
	waitCommit(b)
	backdate(filepath.Join(hf, "models--org--big"))
	// A job still runs on the old revision: it stays, and the fetch is
	// refused saying so.
	run := filepath.Join(e.dir, "n1", "run")
	if err := catalog.WriteJobRecord(run, catalog.JobRecord{Job: "7", Model: "big", Source: catalog.HubSource("org/big", a), Path: snapA, HFCache: hf, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err = ensureHub()
	if err == nil || !strings.Contains(err.Error(), "claimed whole before its first byte") || !strings.Contains(err.Error(), "in use by job 7") {
		t.Fatalf("the new revision's fetch while job 7 runs on the old: %v; want a refusal naming job 7", err)
	}
	if _, err := os.Stat(filepath.Join(snapA, "model.safetensors")); err != nil {
		t.Fatalf("the old revision went from under job 7: %v", err)
	}
	// The job ends: the old revision is superseded and goes.
	os.Remove(filepath.Join(catalog.JobsDir(run), "7.json"))
	if err := ensureHub(); err != nil {
		t.Fatalf("the new revision's fetch once the old may go: %v", err)
	}
	if _, err := os.Lstat(snapA); err == nil {
		t.Error("the old snapshot is still there")
	}
	if _, err := os.Stat(filepath.Join(catalog.HubSnapshotDir(hf, "org/big", b), "model.safetensors")); err != nil {
		t.Errorf("the new revision: %v", err)
	}
	if ref, _ := os.ReadFile(catalog.HubRefPath(hf, "org/big", "main")); string(ref) != b {
		t.Errorf("refs/main = %q, want %s", ref, b)
	}
	if blobs, _ := os.ReadDir(filepath.Join(hf, "models--org--big", "blobs")); len(blobs) != 2 {
		t.Errorf("blobs after the old revision went: %v; want the new shard and the shared config", blobs)
	}

	// llmgw gc lists the eviction of the old snapshot with its reason.
	code, out, errs := llmgwRun(t, admin, "gc", "--node", "n1")
	if code != 0 {
		t.Fatalf("llmgw gc: %d %s", code, errs)
	}
	if !strings.Contains(out, "models--org--big/snapshots/"+a) || !strings.Contains(out, "superseded: model big no longer wants it") {
		t.Errorf("llmgw gc does not show the old snapshot's eviction:\n%s", out)
	}
}
