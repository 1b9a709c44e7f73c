package gc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// backdateHub makes everything in the Hugging Face cache hf old, as a
// fetch long ago leaves it.
func backdateHub(t *testing.T, hf string) {
	t.Helper()
	long := time.Now().Add(-time.Hour)
	filepath.Walk(hf, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			ts := []unix.Timespec{unix.NsecToTimespec(long.UnixNano()), unix.NsecToTimespec(long.UnixNano())}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
}

func entryNamed(es []Entry, name string) (Entry, bool) {
	for _, e := range es {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// A Hub model's snapshots are eviction entries: the catalog commit's is
// wanted by the model, another commit's superseded by it; the blob both
// share is counted once, with the catalog's; a snapshot a job record
// names is in use; another repository is no entry. Evicting the old
// snapshot removes it, the blobs it alone linked and the refs that named
// it, never the shared blob; a snapshot in use stays; evicting the
// catalog's snapshot takes its blobs too. Before, eviction saw only the
// llmgw cache's own names, and a node whose disk an old revision filled
// refused every fetch while gc waited for its interval.
func TestHubSnapshotsEvicted(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	run := t.TempDir()
	cp, old, cur := hubCache(t, hf)
	backdateHub(t, hf)
	cp.Fetched = time.Now()
	opt := Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: run}
	repo := filepath.Join(hf, "models--org--tiny")
	oldName, curName := HubEntryName("org/tiny", old), HubEntryName("org/tiny", cur)

	es, err := Entries(opt)
	if err != nil {
		t.Fatal(err)
	}
	oe, ok1 := entryNamed(es, oldName)
	ce, ok2 := entryNamed(es, curName)
	if !ok1 || !ok2 || len(es) != 2 {
		t.Fatalf("Entries = %+v; want the two snapshots of org/tiny and nothing of else/where", es)
	}
	blk := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(repo, "blobs", name))
		if err != nil {
			t.Fatal(err)
		}
		return blocks(fi)
	}
	oldOwn := blk(strings.Repeat("1", 40)) + blk(strings.Repeat("4", 64))
	curOwn := blk(strings.Repeat("2", 40)) + blk(strings.Repeat("5", 64)) + blk(strings.Repeat("3", 40))
	if oe.Superseded != "tiny" || oe.Wanted != "" || oe.Size != oldOwn || oe.Path != filepath.Join(hf, oldName) {
		t.Errorf("the old snapshot's entry = %+v; want superseded by tiny, %d bytes (its own blobs)", oe, oldOwn)
	}
	if ce.Wanted != "tiny" || ce.Superseded != "" || ce.Size != curOwn {
		t.Errorf("the catalog snapshot's entry = %+v; want wanted by tiny, %d bytes (its blobs and the shared one)", ce, curOwn)
	}

	// In use: named by a job record, kept by Entries and by Evict.
	oldSnap := filepath.Join(hf, oldName)
	catalog.WriteJobRecord(run, catalog.JobRecord{Job: "7", Model: "tiny", Source: catalog.HubSource("org/tiny", old), Path: oldSnap, Time: time.Now()})
	if es, _ := Entries(opt); func() string { e, _ := entryNamed(es, oldName); return e.InUse }() != "job 7" {
		t.Errorf("the old snapshot under job 7: %+v; want in use by job 7", es)
	}
	r := Evict(opt, map[string]string{oldName: "superseded"})
	if f := hubFile(r, old); f.Action != Kept || !strings.Contains(f.Reason, "in use by job 7") {
		t.Errorf("evicting the snapshot job 7 uses: %+v", f)
	}
	if _, err := os.Stat(filepath.Join(oldSnap, "config.json")); err != nil {
		t.Fatalf("the old snapshot is gone under job 7: %v", err)
	}
	os.Remove(filepath.Join(catalog.JobsDir(run), "7.json"))

	// A fetch writing a blob of the repository: kept.
	part := filepath.Join(repo, "blobs", strings.Repeat("9", 64)+".part")
	os.WriteFile(part, []byte("x"), 0o644)
	if f := hubFile(Evict(opt, map[string]string{oldName: "superseded"}), old); f.Action != Kept || !strings.Contains(f.Reason, "a fetch is writing") {
		t.Errorf("evicting while a fetch writes a blob: %+v", f)
	}
	os.Remove(part)

	r = Evict(opt, map[string]string{oldName: "superseded: model tiny no longer wants it"})
	if f := hubFile(r, old); f.Action != Removed || f.Size != oldOwn || r.Freed != oldOwn {
		t.Fatalf("evicting the old snapshot: %+v (freed %d); want it removed, %d bytes freed", r.Files, r.Freed, oldOwn)
	}
	for _, gone := range []string{"snapshots/" + old, "blobs/" + strings.Repeat("1", 40), "blobs/" + strings.Repeat("4", 64), "refs/v1"} {
		if _, err := os.Lstat(filepath.Join(repo, gone)); err == nil {
			t.Errorf("%s is still there after the old snapshot was evicted", gone)
		}
	}
	for _, kept := range []string{"snapshots/" + cur + "/tok/tokenizer.json", "snapshots/" + cur + "/model.safetensors", "refs/main"} {
		if _, err := os.Stat(filepath.Join(repo, kept)); err != nil {
			t.Errorf("%s went with the old snapshot: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(hf, "models--else--where")); err != nil {
		t.Errorf("another repository was touched: %v", err)
	}

	// The catalog's own snapshot, under pressure: its blobs go too.
	r = Evict(opt, map[string]string{curName: "least recently used"})
	if f := hubFile(r, cur); f.Action != Removed || f.Size != curOwn {
		t.Fatalf("evicting the catalog's snapshot: %+v; want it removed, %d bytes freed", r.Files, curOwn)
	}
	if left, _ := os.ReadDir(filepath.Join(repo, "blobs")); len(left) != 0 {
		t.Errorf("blobs left after every snapshot was evicted: %v", left)
	}
	if _, err := os.Stat(filepath.Join(repo, "refs", "main")); err == nil {
		t.Error("refs/main still names an evicted commit")
	}
}

// A snapshot written after the node's catalog copy was fetched is a
// Prolog's fetch of a commit newer than the copy: wanted, not superseded.
func TestHubSnapshotNewerThanTheCopy(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	cp, old, _ := hubCache(t, hf)
	cp.Fetched = time.Now().Add(-time.Hour)
	es, err := Entries(Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := entryNamed(es, HubEntryName("org/tiny", old)); e.Wanted != "tiny" || e.Superseded != "" {
		t.Errorf("a snapshot newer than the catalog copy: %+v; want it wanted", e)
	}
}

// TestHubSnapshotsLinkedFolders: eviction never judges or removes a Hub
// repository through a link planted in a cache users can write. With
// org/tiny's folder, its snapshots/ or its blobs/ a link to another
// repository's, eviction listed that repository's snapshot as org/tiny's
// superseded one and removed it, or removed its blobs as org/tiny's
// leftovers (gc refused the same repository since hub-review; eviction,
// from main, did not know to). Now the repository is no entry, and an
// eviction asked for it keeps everything, saying why.
func TestHubSnapshotsLinkedFolders(t *testing.T) {
	for _, folder := range []string{"", "snapshots", "blobs"} {
		t.Run("link"+folder, func(t *testing.T) {
			cache := t.TempDir()
			hf := filepath.Join(cache, catalog.DefaultHFDir)
			cp, old, _ := hubCache(t, hf)
			victim, theirs := plantRepoLink(t, hf, folder, old)
			backdateHub(t, hf)
			cp.Fetched = time.Now()
			opt := Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir()}
			es, err := Entries(opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if strings.HasPrefix(e.Name, "models--org--tiny/") {
					t.Errorf("an entry judged through the planted link: %+v", e)
				}
			}
			name := HubEntryName("org/tiny", old)
			r := Evict(opt, map[string]string{name: "superseded"})
			if f := hubFile(r, old); f.Action != Kept || !strings.Contains(f.Reason, "symbolic link") {
				t.Errorf("evicting org/tiny's old snapshot through a planted link: %+v; want kept, naming the link", r.Files)
			}
			for _, b := range theirs {
				if _, err := os.Stat(filepath.Join(victim, "blobs", b)); err != nil {
					t.Errorf("else/where's blob %s went through a planted link: %v", b, err)
				}
			}
			if _, err := os.Stat(filepath.Join(victim, "snapshots", old)); err != nil {
				t.Errorf("else/where's snapshot went through a planted link: %v", err)
			}
		})
	}
}

// TestHubStagingEvictionAgreesWithGC: eviction judges what Hub fetches
// left in the llmgw cache's staging directory by gc's rules. What gc
// would remove (a stopped fetch of a blob no catalog model lists, or one
// untouched past gc_part_max_age) is an unwanted eviction entry, taken
// first under pressure; what gc keeps (a fetch running, a stopped fetch
// of a listed blob to resume, anything not named as a blob, a link) is
// no entry and an eviction asked for it keeps it; and only a fetch
// running makes the repository's snapshots "fetching". Before, eviction
// counted any file there touched in the last ten minutes as a fetch and
// never removed one: a disk full of a stopped fetch's shard evicted the
// models jobs want instead.
func TestHubStagingEvictionAgreesWithGC(t *testing.T) {
	cache := t.TempDir()
	hf := filepath.Join(cache, catalog.DefaultHFDir)
	cp, _, _ := hubCache(t, hf)
	backdateHub(t, hf)
	cp.Fetched = time.Now()
	stage := filepath.Join(cache, catalog.HubStagingDir, "models--org--tiny")
	os.MkdirAll(stage, 0o755)
	old, stale := time.Now().Add(-2*time.Hour), time.Now().Add(-48*time.Hour)
	write := func(name string, size int, at time.Time) string {
		if err := os.WriteFile(filepath.Join(stage, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(stage, name), at, at)
		return catalog.HubStagingDir + "/models--org--tiny/" + name
	}
	wanted := strings.Repeat("5", 64) + catalog.PartSuffix // the catalog's shard, to resume
	garbage := map[string]bool{
		write(strings.Repeat("9", 64)+catalog.PartSuffix, 300, old): true, // unlisted, stopped
		write(strings.Repeat("8", 40), 20, old):                     true, // unlisted whole blob never moved in
		write(strings.Repeat("2", 40)+catalog.PartSuffix, 7, stale): true, // listed, past gc_part_max_age
		write(wanted, 100, old):                                     false,
		write("notes.txt", 5, time.Now()):                           false, // not llmgw's, and no fetch
	}
	opt := Options{CacheDir: cache, HFCache: hf, Catalog: cp, RunDir: t.TempDir(), PartMaxAge: 24 * time.Hour}

	// gc's listing and eviction's entries name the same files.
	listed := map[string]bool{}
	for _, f := range Run(opt).Files {
		if strings.HasPrefix(f.Name, catalog.HubStagingDir+"/") && f.Action == Listed {
			listed[f.Name] = true
		}
	}
	es, err := Entries(opt)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, e := range es {
		if strings.HasPrefix(e.Name, catalog.HubStagingDir+"/") {
			entries[e.Name] = true
			if e.Wanted != "" || e.Superseded != "" || e.Fetching || e.Size <= 0 {
				t.Errorf("staging entry %+v; want unwanted, not fetching, with its size", e)
			}
		}
		if IsHubEntry(e.Name) && e.Fetching {
			t.Errorf("%s is fetching with no fetch running (a stray file in staging)", e.Name)
		}
	}
	for name, isGarbage := range garbage {
		if listed[name] != isGarbage || entries[name] != isGarbage {
			t.Errorf("%s: gc lists it %v, eviction has it as an entry %v; both want %v", name, listed[name], entries[name], isGarbage)
		}
	}

	// Evicted: the garbage goes; what gc keeps, eviction keeps.
	reasons := map[string]string{}
	for name := range garbage {
		reasons[name] = "unwanted"
	}
	r := Evict(opt, reasons)
	var freed int64
	for name, isGarbage := range garbage {
		f := hubFile(r, name)
		_, err := os.Lstat(filepath.Join(cache, name))
		if isGarbage && (f.Action != Removed || err == nil) || !isGarbage && (f.Action == Removed || err != nil) {
			t.Errorf("evicting %s: %+v (there: %v); want removed %v", name, f, err == nil, isGarbage)
		}
		if f.Action == Removed {
			freed += f.Size
		}
	}
	if r.Freed != freed || freed <= 0 {
		t.Errorf("evicting the staging garbage freed %d (files say %d)", r.Freed, freed)
	}

	// A fetch running in staging: the repository's snapshots are fetching,
	// for gc (kept, not listed) and for eviction alike.
	running := write(strings.Repeat("7", 64)+catalog.PartSuffix, 50, time.Now())
	es, _ = Entries(opt)
	for _, e := range es {
		if IsHubEntry(e.Name) && !e.Fetching {
			t.Errorf("%s not fetching while a fetch writes %s", e.Name, running)
		}
		if e.Name == running {
			t.Errorf("a running fetch's file is an eviction entry: %+v", e)
		}
	}
	if f := hubFile(Evict(opt, map[string]string{running: "unwanted"}), running); f.Action != Kept || !strings.Contains(f.Reason, "writing it") {
		t.Errorf("evicting a running fetch's file: %+v; want kept", f)
	}
}
