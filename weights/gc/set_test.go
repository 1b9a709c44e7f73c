package gc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

func setModel(name, dir string) catalog.Model {
	return catalog.Model{Name: name, Files: []catalog.File{
		{Source: "https://origin.example/" + dir + "/w-00001-of-00002.gguf"},
		{Source: "https://origin.example/" + dir + "/w-00002-of-00002.gguf"},
	}}
}

// writeSet puts the set m in the node's cache as the fetcher leaves it.
func (n *node) writeSet(m catalog.Model) string {
	n.t.Helper()
	if err := catalog.WriteManifest(n.cache, m); err != nil {
		n.t.Fatal(err)
	}
	dir := catalog.SetDir(n.cache, m)
	for _, f := range m.Files {
		n.write(catalog.SetFilePath(dir, f.Source), 1000)
	}
	return dir
}

// TestSetCollectedWhole: a model of several files is one directory to gc:
// kept while the catalog wants it, kept while a job's record names it,
// never one file of it, and otherwise removed whole. A directory that only
// looks like a set (no manifest, or one naming another set) is not llmgw's.
func TestSetCollectedWhole(t *testing.T) {
	n := newNode(t)
	wanted, unwanted := setModel("wanted", "a"), setModel("unwanted", "b")
	n.cat.Models = append(n.cat.Models, wanted)
	wdir, udir := n.writeSet(wanted), n.writeSet(unwanted)
	wname, uname := filepath.Base(wdir), filepath.Base(udir)
	man, err := os.Stat(filepath.Join(udir, catalog.SetManifest))
	if err != nil {
		t.Fatal(err)
	}
	size := 2000 + man.Size() // both parts and the manifest
	// A directory with a set's name but no manifest, and one whose
	// manifest names another set.
	fake := filepath.Join(n.cache, "0123456789abcdef-fake.set")
	os.MkdirAll(fake, 0o755)
	n.write(filepath.Join(fake, "w.gguf"), 10)
	other := filepath.Join(n.cache, "fedcba9876543210-w.set")
	os.MkdirAll(other, 0o755)
	b, _ := os.ReadFile(filepath.Join(udir, catalog.SetManifest))
	os.WriteFile(filepath.Join(other, catalog.SetManifest), b, 0o644)

	r := Run(n.opts(false))
	if hasEntry(r, wname) {
		t.Errorf("the wanted set is listed: %+v", find(t, r, wname))
	}
	if f := find(t, r, uname); f.Action != Listed || f.Size != size {
		t.Errorf("the unwanted set: %+v; want listed with both files' bytes", f)
	}
	for _, name := range []string{filepath.Base(fake), filepath.Base(other)} {
		if f := find(t, r, name); f.Action != Refused || !strings.Contains(f.Reason, "llmgw did not make it") {
			t.Errorf("%s: %+v; want refused as not llmgw's", name, f)
		}
	}

	// Asked for one file of a set, or the wanted set: refused.
	only := Run(Options{CacheDir: n.cache, Catalog: n.cat, RunDir: n.run, Collect: true,
		Only: []string{uname + "/w-00001-of-00002.gguf", wname}})
	for _, f := range only.Files {
		if f.Action != Refused {
			t.Errorf("asked %s: %+v; want refused", f.Name, f)
		}
	}

	// A job whose record names the set keeps it.
	if err := catalog.WriteJobRecord(n.run, catalog.JobRecord{Job: "7", Model: "unwanted", Source: unwanted.Source,
		Set: uname, Path: catalog.SetPath(n.cache, unwanted), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if f := find(t, Run(n.opts(true)), uname); f.Action != Kept || !strings.Contains(f.Reason, "job 7") {
		t.Errorf("the unwanted set a job uses: %+v; want kept", f)
	}
	os.Remove(filepath.Join(catalog.JobsDir(n.run), "7.json"))

	// A fetch in progress in it: not garbage.
	part := filepath.Join(udir, "w-00002-of-00002.gguf"+catalog.PartSuffix)
	n.write(part, 10)
	if r := Run(n.opts(true)); hasEntry(r, uname) || !n.exists(udir) {
		t.Errorf("the unwanted set with a live .part: %+v; want it left alone", r.Files)
	}
	os.Remove(part)

	r = Run(n.opts(true))
	if f := find(t, r, uname); f.Action != Removed || f.Size != size {
		t.Errorf("collecting the unwanted set: %+v; want removed whole", f)
	}
	if n.exists(udir) {
		t.Errorf("%s is still there", udir)
	}
	for _, p := range []string{wdir, fake, other, filepath.Join(wdir, "w-00001-of-00002.gguf")} {
		if !n.exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
}

// TestStalePartInSetAgesOut: a fetch left behind inside a set directory
// ages out like one at the top of the cache (gc_part_max_age), even while
// the catalog wants the set, and a live one is left alone. On main
// gc_part_max_age reached only the top level, and such a .part stayed.
func TestStalePartInSetAgesOut(t *testing.T) {
	n := newNode(t)
	m := catalog.Model{Name: "wanted", Files: []catalog.File{
		{Source: "https://origin.example/s/w-00001-of-00002.gguf"},
		{Source: "https://origin.example/s/w-00002-of-00002.gguf"},
	}}
	n.cat.Models = append(n.cat.Models, m)
	if err := catalog.WriteManifest(n.cache, m); err != nil {
		t.Fatal(err)
	}
	dir := catalog.SetDir(n.cache, m)
	n.write(catalog.SetFilePath(dir, m.Files[0].Source), 1000)
	stale := catalog.SetFilePath(dir, m.Files[1].Source) + catalog.PartSuffix
	n.write(stale, 500)
	n.write(stale[:len(stale)-len(catalog.PartSuffix)]+catalog.RangesSuffix, 10)
	old := time.Now().Add(-8 * 24 * time.Hour)
	for _, p := range []string{stale, stale[:len(stale)-len(catalog.PartSuffix)] + catalog.RangesSuffix} {
		os.Chtimes(p, old, old)
	}
	opt := n.opts(false)
	opt.PartMaxAge = 7 * 24 * time.Hour
	r := Run(opt)
	name := filepath.Base(dir) + "/" + filepath.Base(stale)
	f := find(t, r, name)
	if f.Action != Listed || !strings.Contains(f.Reason, "gc_part_max_age") {
		t.Fatalf("a week-old .part inside a wanted set: %+v; want it listed for its age", f)
	}
	opt.Collect = true
	r = Run(opt)
	if f := find(t, r, name); f.Action != Removed {
		t.Fatalf("collect: %+v", f)
	}
	if n.exists(stale) || !n.exists(catalog.SetFilePath(dir, m.Files[0].Source)) || !n.exists(filepath.Join(dir, catalog.SetManifest)) {
		t.Errorf("after collect: stale .part %v, the set's finished file %v, its manifest %v; want only the .part gone",
			n.exists(stale), n.exists(catalog.SetFilePath(dir, m.Files[0].Source)), n.exists(filepath.Join(dir, catalog.SetManifest)))
	}
	// A fresh .part (a fetch under way) is not news.
	n.write(stale, 500)
	if r := Run(opt); hasEntry(r, name) {
		t.Errorf("a live .part inside a set was judged: %+v", find(t, r, name))
	}
	// A coordinator naming a nested path that is no set's .part is refused.
	opt.Only = []string{filepath.Base(dir) + "/" + filepath.Base(catalog.SetFilePath(dir, m.Files[0].Source)), "../x/y.part", filepath.Base(dir) + "/../../etc/passwd"}
	for _, f := range Run(opt).Files {
		if f.Action != Refused {
			t.Errorf("asked %q: %+v; want refused", f.Name, f)
		}
	}
}

// A file kept for being fetched within the gc interval says when it can
// go, and is kept under --force all the same.
func TestRecentSaysWhenItCanGo(t *testing.T) {
	n := newNode(t)
	opt := n.opts(true)
	opt.Recent, opt.Force = time.Hour, true
	r := Run(opt)
	f := find(t, r, filepath.Base(n.cachePath(goneSrc)))
	if f.Action != Kept || !strings.Contains(f.Reason, "it can go after ") || !strings.Contains(f.Reason, "--force or not") {
		t.Errorf("a file fetched just now, forced: %+v; want kept, saying when it can go", f)
	}
}
