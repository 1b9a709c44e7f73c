package gc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// hubCache lays out org/tiny in a Hugging Face cache as two revisions of a
// Hub model leave it: old (a config and a shard of its own, a tokenizer
// shared with cur) and cur, the catalog's; refs/main names cur, refs/v1
// old. It returns the catalog copy that has the model at cur.
func hubCache(t *testing.T, hf string) (cp catalog.Copy, old, cur string) {
	t.Helper()
	old, cur = strings.Repeat("a", 40), strings.Repeat("b", 40)
	repo := filepath.Join(hf, "models--org--tiny")
	blob := func(name string, size int) {
		os.MkdirAll(filepath.Join(repo, "blobs"), 0o755)
		os.WriteFile(filepath.Join(repo, "blobs", name), make([]byte, size), 0o644)
	}
	link := func(commit, p, name string) {
		l := filepath.Join(repo, "snapshots", commit, p)
		os.MkdirAll(filepath.Dir(l), 0o755)
		if err := os.Symlink(catalog.HubLinkTarget(p, name), l); err != nil {
			t.Fatal(err)
		}
	}
	oldConfig, curConfig, tok := strings.Repeat("1", 40), strings.Repeat("2", 40), strings.Repeat("3", 40)
	oldShard, curShard := strings.Repeat("4", 64), strings.Repeat("5", 64)
	blob(oldConfig, 10)
	blob(curConfig, 11)
	blob(tok, 12)
	blob(oldShard, 1000)
	blob(curShard, 2000)
	link(old, "config.json", oldConfig)
	link(old, "tok/tokenizer.json", tok)
	link(old, "model.safetensors", oldShard)
	link(cur, "config.json", curConfig)
	link(cur, "tok/tokenizer.json", tok)
	link(cur, "model.safetensors", curShard)
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(cur), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "v1"), []byte(old), 0o644)
	h := &catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: cur, Files: []catalog.HubFile{
		{Path: "config.json", Size: 11, Blob: curConfig}, {Path: "tok/tokenizer.json", Size: 12, Blob: tok}, {Path: "model.safetensors", Size: 2000, SHA256: curShard}}}
	cp = catalog.Copy{Models: []catalog.Model{{Name: "tiny", Source: catalog.HubSource(h.Repo, cur), Hub: h}}}
	// Someone else's repository beside it, with a snapshot of its own.
	other := filepath.Join(hf, "models--else--where", "snapshots", old)
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "x.safetensors"), []byte("x"), 0o644)
	return cp, old, cur
}

func hubFile(r Result, suffix string) File {
	for _, f := range r.Files {
		if strings.HasSuffix(f.Name, suffix) {
			return f
		}
	}
	return File{}
}

// TestHubRevisions: an old revision of a Hub model is kept while a job on
// the node uses it, listed without --collect, and collected with it: its
// snapshot, the blobs it alone linked, the refs that named it; never the
// model's revision, a blob it shares, or another repository.
func TestHubRevisions(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	run := t.TempDir()
	cp, old, cur := hubCache(t, hf)
	oldSnap := filepath.Join(hf, "models--org--tiny", "snapshots", old)
	opt := Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: run, Collect: true}

	// A job on this node was given the old revision before the repin.
	if err := catalog.WriteJobRecord(run, catalog.JobRecord{Job: "7", Model: "tiny", Source: catalog.HubSource("org/tiny", old), Path: oldSnap, HFCache: hf, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r := Run(opt)
	if f := hubFile(r, old); f.Action != Kept || !strings.Contains(f.Reason, "in use by job 7") {
		t.Errorf("the old revision while job 7 uses it: %+v", f)
	}
	if _, err := os.Stat(filepath.Join(oldSnap, "config.json")); err != nil {
		t.Fatalf("the old revision is gone under job 7: %v", err)
	}
	os.Remove(filepath.Join(catalog.JobsDir(run), "7.json"))

	list := opt
	list.Collect = false
	if f := hubFile(Run(list), old); f.Action != Listed {
		t.Errorf("without --collect: %+v; want listed", f)
	}
	recent := opt
	recent.Recent = time.Hour
	if f := hubFile(Run(recent), old); f.Action != Kept || !strings.Contains(f.Reason, "within the last") {
		t.Errorf("a revision written within the gc interval: %+v; want kept", f)
	}

	r = Run(opt)
	if f := hubFile(r, old); f.Action != Removed {
		t.Fatalf("the old revision, unused: %+v; want removed (%+v)", f, r)
	}
	if _, err := os.Lstat(oldSnap); !os.IsNotExist(err) {
		t.Errorf("the old snapshot is still there: %v", err)
	}
	blobs := filepath.Join(hf, "models--org--tiny", "blobs")
	for name, want := range map[string]bool{strings.Repeat("1", 40): false, strings.Repeat("4", 64): false,
		strings.Repeat("2", 40): true, strings.Repeat("3", 40): true, strings.Repeat("5", 64): true} {
		if _, err := os.Stat(filepath.Join(blobs, name)); (err == nil) != want {
			t.Errorf("blob %s there: %v, want %v", name, err == nil, want)
		}
	}
	if r.Freed != 1010 {
		t.Errorf("freed %d bytes, want 1010 (the old config and shard)", r.Freed)
	}
	if b, err := os.ReadFile(filepath.Join(hf, "models--org--tiny", "snapshots", cur, "tok", "tokenizer.json")); err != nil || len(b) != 12 {
		t.Errorf("the model's revision lost its shared tokenizer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(hf, "models--org--tiny", "refs", "v1")); !os.IsNotExist(err) {
		t.Errorf("refs/v1 still names the removed commit: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(hf, "models--org--tiny", "refs", "main")); string(b) != cur {
		t.Errorf("refs/main = %s", b)
	}
	if _, err := os.Stat(filepath.Join(hf, "models--else--where", "snapshots", old, "x.safetensors")); err != nil {
		t.Errorf("another repository was touched: %v", err)
	}
}

// TestHubRevisionsHeld: a coordinator's named gc, a catalog the node does
// not trust, and a Hugging Face cache on another filesystem (a filer, read
// by other nodes' jobs) each leave the old revisions alone.
func TestHubRevisionsHeld(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	cp, old, _ := hubCache(t, hf)
	oldSnap := filepath.Join(hf, "models--org--tiny", "snapshots", old)

	asked := Run(Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir(), Collect: true, Only: []string{}})
	if f := hubFile(asked, old); f.Name != "" {
		t.Errorf("a coordinator's gc judged a revision: %+v", f)
	}
	distrusted := cp
	distrusted.CatalogID, distrusted.TrustedID = "b", "a"
	if f := hubFile(Run(Options{CacheDir: cache, HFCache: hf, Catalog: distrusted, RunDir: t.TempDir(), Collect: true}), old); f.Action != Kept {
		t.Errorf("against a catalog the node does not trust: %+v; want kept", f)
	}
	if _, err := os.Stat(oldSnap); err != nil {
		t.Fatal(err)
	}

	filer, err := os.MkdirTemp("/dev/shm", "llmgw-gc-hf-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(filer) })
	if sameFS(filer, cache) {
		t.Skip("/dev/shm is on the test cache's filesystem")
	}
	hubCache(t, filer)
	r := Run(Options{CacheDir: cache, HFCache: filer, Catalog: cp, RunDir: t.TempDir(), Collect: true})
	if f := hubFile(r, old); f.Action != Kept || !strings.Contains(f.Reason, "another filesystem") {
		t.Errorf("an old revision on a filer: %+v; want kept, saying why", f)
	}
}

// TestHubStagingLeftovers: a Hub model's blobs are fetched in the llmgw
// cache's staging directory and moved out once verified, so what stays
// there is a fetch that stopped (a node rebooted mid-shard) or a blob that
// could not be moved in. One whose blob no catalog Hub model lists, or
// untouched for gc_part_max_age, is garbage, removed with --collect (it
// stayed forever, 140 GB of a shard at a time); never one touched within
// the quiet time or the gc interval, nor anything not named as a blob.
func TestHubStagingLeftovers(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	cp, _, _ := hubCache(t, hf)
	stage := filepath.Join(cache, catalog.HubStagingDir, "models--org--tiny")
	os.MkdirAll(stage, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	write := func(name string, size int, at time.Time) string {
		p := filepath.Join(stage, name)
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, at, at)
		return p
	}
	wantedShard := strings.Repeat("5", 64) // the catalog's model.safetensors
	gone := strings.Repeat("9", 64)        // a shard of a revision no longer in the catalog
	paths := map[string]bool{              // path → stays
		write(wantedShard+catalog.PartSuffix, 100, old):                   true,  // resumable, wanted
		write(wantedShard+catalog.RangesSuffix, 10, old):                  true,  // its record
		write(gone+catalog.PartSuffix, 300, old):                          false, // left behind
		write(gone+catalog.RangesSuffix, 10, old):                         false,
		write(strings.Repeat("8", 40), 20, old):                           false, // a whole blob never moved in, unwanted
		write(strings.Repeat("7", 64)+catalog.PartSuffix, 50, time.Now()): true,  // a fetch running
		write("notes.txt", 5, old):                                        true,  // not llmgw's
	}
	link := filepath.Join(stage, strings.Repeat("6", 64)+catalog.PartSuffix)
	os.Symlink(filepath.Join(cache, "elsewhere"), link)
	paths[link] = true

	opt := Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir(), Collect: true, PartMaxAge: 24 * time.Hour, Recent: 10 * time.Minute}
	list := opt
	list.Collect = false
	if f := hubFile(Run(list), gone+catalog.PartSuffix); f.Action != Listed {
		t.Errorf("a stopped fetch of an unwanted blob, without --collect: %+v; want listed", f)
	}
	r := Run(opt)
	for p, stays := range paths {
		if _, err := os.Lstat(p); (err == nil) != stays {
			t.Errorf("%s there: %v, want %v (%+v)", filepath.Base(p), err == nil, stays, hubFile(r, filepath.Base(p)))
		}
	}
	if r.Freed < 330 {
		t.Errorf("freed %d bytes, want at least the 330 left behind", r.Freed)
	}

	// Past gc_part_max_age, a wanted blob's stopped fetch goes too.
	stale := opt
	stale.PartMaxAge = time.Hour
	Run(stale)
	if _, err := os.Stat(filepath.Join(stage, wantedShard+catalog.PartSuffix)); !os.IsNotExist(err) {
		t.Errorf("a wanted blob's fetch untouched past gc_part_max_age is still there: %v", err)
	}
}

// TestHubRevisionsLinkedFolders: in a Hugging Face cache a user can write,
// a repository's blobs/ or snapshots/ may be a link someone planted to
// another repository's: gc, judging org/tiny's old revision, must not
// remove the other repository's blobs (which org/tiny's snapshots do not
// link) through it. A repository whose folders are links is left alone,
// saying so.
func TestHubRevisionsLinkedFolders(t *testing.T) {
	for _, folder := range []string{"blobs", "snapshots"} {
		t.Run(folder, func(t *testing.T) {
			cache := t.TempDir()
			hf := filepath.Join(cache, catalog.DefaultHFDir)
			cp, old, _ := hubCache(t, hf)
			victim, other := plantRepoLink(t, hf, folder, old)
			r := Run(Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir(), Collect: true})
			for _, b := range other {
				if _, err := os.Stat(filepath.Join(victim, "blobs", b)); err != nil {
					t.Errorf("gc of org/tiny removed else/where's blob %s through a planted link: %v (%+v)", b, err, r.Files)
				}
			}
			if _, err := os.Stat(filepath.Join(victim, "snapshots", old)); err != nil {
				t.Errorf("gc of org/tiny removed else/where's snapshot through a planted link: %v", err)
			}
		})
	}
}

// plantRepoLink lays out another repository, else/where, at commit with
// blobs of its own (theirs), and makes org/tiny's folder (folder, or the
// repository's own for "") a link to else/where's, relative, as a user
// plants it: os.Root follows a link that stays inside the cache.
func plantRepoLink(t *testing.T, hf, folder, commit string) (victim string, theirs []string) {
	t.Helper()
	victim = filepath.Join(hf, "models--else--where")
	theirs = hubCacheRepo(t, hf, "else/where", commit)
	tiny := filepath.Join(hf, "models--org--tiny", folder)
	os.RemoveAll(tiny)
	target := "models--else--where"
	if folder != "" {
		target = "../models--else--where/" + folder
	}
	if err := os.Symlink(target, tiny); err != nil {
		t.Fatal(err)
	}
	return victim, theirs
}

// hubCacheRepo lays out repo at commit with two blobs of its own and
// returns their names.
func hubCacheRepo(t *testing.T, hf, repo, commit string) []string {
	t.Helper()
	dir := filepath.Join(hf, catalog.RepoFolder(repo))
	names := []string{strings.Repeat("e", 40), strings.Repeat("f", 64)}
	for i, n := range names {
		os.MkdirAll(filepath.Join(dir, "blobs"), 0o755)
		os.WriteFile(filepath.Join(dir, "blobs", n), make([]byte, 10+i), 0o644)
		l := filepath.Join(dir, "snapshots", commit, fmt.Sprintf("f%d.safetensors", i))
		os.MkdirAll(filepath.Dir(l), 0o755)
		os.Symlink(catalog.HubLinkTarget(filepath.Base(l), n), l)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(filepath.Join(dir, "snapshots", commit), old, old)
	return names
}
