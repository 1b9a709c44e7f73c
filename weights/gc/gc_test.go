package gc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

const (
	keptSrc = "https://origin.example/models/kept.gguf"
	goneSrc = "https://origin.example/models/gone.gguf"
	usedSrc = "hf:org/repo/used.safetensors"
)

// node is a cache directory and run directory on real files, as a node has
// them after fetching three models, with the catalog wanting only one.
type node struct {
	t       *testing.T
	cache   string
	run     string
	outside string // a directory beside the cache, with a file in it
	cat     catalog.Copy
}

func newNode(t *testing.T) *node {
	t.Helper()
	base := t.TempDir()
	n := &node{t: t, cache: filepath.Join(base, "cache"), run: filepath.Join(base, "run"), outside: filepath.Join(base, "etc")}
	for _, d := range []string{n.cache, n.run, n.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(filepath.Join(n.outside, "passwd"), 7)
	n.cat = catalog.Copy{Models: []catalog.Model{{Name: "kept", Source: keptSrc}, {Name: "local", Source: "/models/x.gguf"}}}
	n.write(n.cachePath(keptSrc), 100)
	n.write(n.cachePath(goneSrc), 200)
	n.write(n.cachePath(usedSrc), 300)
	return n
}

func (n *node) cachePath(src string) string { return catalog.CachePathFor(n.cache, src) }

func (n *node) write(p string, size int) {
	n.t.Helper()
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (n *node) opts(collect bool) Options {
	return Options{CacheDir: n.cache, Catalog: n.cat, RunDir: n.run, Collect: collect}
}

func find(t *testing.T, r Result, name string) File {
	t.Helper()
	for _, f := range r.Files {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("result has no entry for %q: %+v", name, r.Files)
	return File{}
}

func hasEntry(r Result, name string) bool {
	for _, f := range r.Files {
		if f.Name == name {
			return true
		}
	}
	return false
}

func TestListIsDefault(t *testing.T) {
	n := newNode(t)
	r := Run(n.opts(false))
	gone, used := catalog.CacheName(goneSrc), catalog.CacheName(usedSrc)
	for _, name := range []string{gone, used} {
		if f := find(t, r, name); f.Action != Listed || f.Asked {
			t.Errorf("%s: %+v, want listed, not asked", name, f)
		}
	}
	if hasEntry(r, catalog.CacheName(keptSrc)) {
		t.Errorf("a wanted file is reported: %+v", r.Files)
	}
	if r.Freed != 0 || r.Count(Removed) != 0 || r.Held != "" {
		t.Errorf("listing removed or held something: %+v", r)
	}
	for _, src := range []string{keptSrc, goneSrc, usedSrc} {
		if !n.exists(n.cachePath(src)) {
			t.Errorf("listing removed %s", n.cachePath(src))
		}
	}
}

func TestCollectRemovesOnlyUnwantedCacheFiles(t *testing.T) {
	n := newNode(t)
	// An operator's file of exactly the size of the one to go, and an
	// operator's file that merely looks like weights, beside them.
	operator := filepath.Join(n.cache, "llama-7b.gguf")
	n.write(operator, 200)
	sameSize := filepath.Join(n.cache, "gone.gguf")
	n.write(sameSize, 200)
	// A symlink with a cache name, pointing at the unwanted file's twin
	// outside the cache, and one pointing at a file inside.
	link := filepath.Join(n.cache, catalog.CacheName("https://origin.example/link.gguf"))
	if err := os.Symlink(filepath.Join(n.outside, "passwd"), link); err != nil {
		t.Fatal(err)
	}
	link2 := filepath.Join(n.cache, catalog.CacheName("https://origin.example/link2.gguf"))
	if err := os.Symlink(n.cachePath(goneSrc), link2); err != nil {
		t.Fatal(err)
	}
	// A fetch in progress of an unwanted source: its .part and ranges.
	part := n.cachePath("https://origin.example/partial.gguf")
	for _, s := range []string{catalog.PartSuffix, catalog.RangesSuffix, catalog.RangesTmpSuffix} {
		n.write(part+s, 10)
	}
	// A directory with a cache name.
	dir := filepath.Join(n.cache, catalog.CacheName("https://origin.example/dir.gguf"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A running job uses usedSrc.
	if err := catalog.WriteJobRecord(n.run, catalog.JobRecord{Job: "42", Model: "used", Source: usedSrc, Path: n.cachePath(usedSrc), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}

	r := Run(n.opts(true))

	gone := find(t, r, catalog.CacheName(goneSrc))
	if gone.Action != Removed || gone.Size != 200 || r.Freed != 200 {
		t.Errorf("unwanted cache file: %+v, freed %d; want removed, 200 bytes", gone, r.Freed)
	}
	if n.exists(n.cachePath(goneSrc)) {
		t.Error("the unwanted cache file is still there")
	}
	if f := find(t, r, catalog.CacheName(usedSrc)); f.Action != Kept || !strings.Contains(f.Reason, "job 42") {
		t.Errorf("file in use: %+v, want kept, naming job 42", f)
	}
	for _, l := range []string{link, link2} {
		if f := find(t, r, filepath.Base(l)); f.Action != Refused || !strings.Contains(f.Reason, "symlink") {
			t.Errorf("symlink: %+v, want refused as a symlink", f)
		}
	}
	if f := find(t, r, filepath.Base(dir)); f.Action != Refused || !strings.Contains(f.Reason, "directory") {
		t.Errorf("directory: %+v, want refused", f)
	}
	for _, p := range []string{n.cachePath(keptSrc), n.cachePath(usedSrc), operator, sameSize, link, link2, dir,
		filepath.Join(n.outside, "passwd"), part + catalog.PartSuffix, part + catalog.RangesSuffix, part + catalog.RangesTmpSuffix} {
		if !n.exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	// Operator files and fetches in progress are not gc's: not even listed.
	for _, name := range []string{"llama-7b.gguf", "gone.gguf", filepath.Base(part) + catalog.PartSuffix} {
		if hasEntry(r, name) {
			t.Errorf("%s is reported: %+v", name, r.Files)
		}
	}
	if r.Count(Removed) != 1 {
		t.Errorf("removed %d files, want 1: %+v", r.Count(Removed), r.Files)
	}
}

// TestAskedNamesAreCheckedAgain: whatever a coordinator asks, the node
// applies every rule itself and says why it refused.
func TestAskedNamesAreCheckedAgain(t *testing.T) {
	n := newNode(t)
	part := catalog.CacheName("https://origin.example/partial.gguf")
	n.write(filepath.Join(n.cache, part+catalog.PartSuffix), 10)
	n.write(filepath.Join(n.cache, part+catalog.RangesSuffix), 10)
	n.write(filepath.Join(n.cache, "operator.gguf"), 200)
	linkName := catalog.CacheName("https://origin.example/link.gguf")
	if err := os.Symlink(filepath.Join(n.outside, "passwd"), filepath.Join(n.cache, linkName)); err != nil {
		t.Fatal(err)
	}
	gone := catalog.CacheName(goneSrc)
	passwd := filepath.Join(n.outside, "passwd")
	cases := map[string]string{
		"../etc/passwd":                       "path",
		"../" + filepath.Base(n.outside):      "path",
		passwd:                                "absolute",
		n.cachePath(goneSrc):                  "absolute", // even its own file, spelt as a path
		"/etc/passwd":                         "absolute",
		"sub/" + gone:                         "path",
		"..":                                  "path",
		".":                                   "path",
		"":                                    "empty",
		"operator.gguf":                       "not a cache name",
		"passwd":                              "not a cache name",
		part + catalog.PartSuffix:             "fetch in progress",
		part + catalog.RangesSuffix:           "fetch in progress",
		catalog.CacheName(keptSrc):            "catalog wants it (model kept)",
		catalog.CacheName("https://x/y.gguf"): "no such file",
		linkName:                              "symlink",
		"0123456789abcdef-..":                 "not a cache name",
		"0123456789abcdef-a\x00b":             "NUL",
	}
	only := []string{gone, gone} // asked twice: answered once
	for name := range cases {
		only = append(only, name)
	}
	r := Run(Options{CacheDir: n.cache, Catalog: n.cat, RunDir: n.run, Collect: true, Only: only})
	for name, want := range cases {
		f := find(t, r, name)
		if f.Action != Refused || !strings.Contains(f.Reason, want) || !f.Asked {
			t.Errorf("asked %q: %+v, want refused with %q", name, f, want)
		}
		if badName(name) != "" && f.Path != "" {
			t.Errorf("asked %q: a path was built from a bad name: %q", name, f.Path)
		}
	}
	if f := find(t, r, gone); f.Action != Removed {
		t.Errorf("asked %s: %+v, want removed", gone, f)
	}
	if len(r.Files) != len(cases)+1 {
		t.Errorf("%d entries for %d distinct names asked", len(r.Files), len(cases)+1)
	}
	// Only what was asked: usedSrc is garbage too, but was not named.
	if hasEntry(r, catalog.CacheName(usedSrc)) || !n.exists(n.cachePath(usedSrc)) {
		t.Error("a name not asked was touched")
	}
	for _, p := range []string{passwd, filepath.Join(n.cache, "operator.gguf"), filepath.Join(n.cache, linkName),
		filepath.Join(n.cache, part+catalog.PartSuffix), n.cachePath(keptSrc)} {
		if !n.exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	// Empty but non-nil: asked nothing, does nothing.
	r = Run(Options{CacheDir: n.cache, Catalog: n.cat, RunDir: n.run, Collect: true, Only: []string{}})
	if len(r.Files) != 0 || !n.exists(n.cachePath(usedSrc)) {
		t.Errorf("Only: [] did something: %+v", r.Files)
	}
}

// TestHeld: when the catalog cannot be trusted or a job record cannot be
// read, nothing goes, and the result says why.
func TestHeld(t *testing.T) {
	cases := []struct {
		name  string
		setup func(n *node, o *Options)
		want  string
	}{
		{"catalog unreadable", func(n *node, o *Options) {
			o.Catalog, o.CatalogErr = catalog.Copy{}, errors.New("catalog copy: no such file")
		}, "cannot be read"},
		{"catalog empty", func(n *node, o *Options) { o.Catalog = catalog.Copy{Models: []catalog.Model{}} }, "reads as empty"},
		{"job record torn", func(n *node, o *Options) {
			n.write(filepath.Join(catalog.JobsDir(n.run), "7.json"), 0)
		}, "cannot rule out"},
		{"jobs dir unreadable", func(n *node, o *Options) {
			// A file where the directory should be: ReadDir fails.
			if err := os.WriteFile(catalog.JobsDir(n.run), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "cannot rule out"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			if err := os.MkdirAll(catalog.JobsDir(n.run), 0o755); err != nil && c.name != "jobs dir unreadable" {
				t.Fatal(err)
			}
			if c.name == "jobs dir unreadable" {
				os.Remove(catalog.JobsDir(n.run))
			}
			o := n.opts(true)
			c.setup(n, &o)
			r := Run(o)
			if !strings.Contains(r.Held, c.want) || r.Count(Removed) != 0 || r.Freed != 0 {
				t.Fatalf("Held = %q, removed %d; want held (%q), nothing removed", r.Held, r.Count(Removed), c.want)
			}
			if f := find(t, r, catalog.CacheName(goneSrc)); f.Action != Kept || f.Reason != r.Held {
				t.Errorf("garbage while held: %+v, want kept with the held reason", f)
			}
			for _, src := range []string{keptSrc, goneSrc, usedSrc} {
				if !n.exists(n.cachePath(src)) {
					t.Errorf("%s was removed while held", src)
				}
			}
		})
	}
}

// TestEmptyCatalogWithoutFetchedWeights: an empty catalog on a node that
// holds no cache names is nothing to worry about and says nothing.
func TestEmptyCatalogWithoutFetchedWeights(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "operator.gguf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Run(Options{CacheDir: dir, RunDir: t.TempDir(), Collect: true})
	if r.Held != "" || len(r.Files) != 0 {
		t.Errorf("Run = %+v, want nothing to say", r)
	}
}

func TestNoCacheDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "cache")
	r := Run(Options{CacheDir: missing, RunDir: t.TempDir(), Collect: true, Only: []string{"0123456789abcdef-x.gguf", "../x"}})
	if r.Held != "" || len(r.Files) != 2 {
		t.Fatalf("Run = %+v", r)
	}
	if f := find(t, r, "../x"); f.Action != Refused || !strings.Contains(f.Reason, "path") {
		t.Errorf("bad name without a cache dir: %+v", f)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Error("gc created the cache directory")
	}
	r = Run(Options{CacheDir: "relative/cache", Only: []string{"a"}})
	if !strings.Contains(r.Held, "absolute") || find(t, r, "a").Action != Refused {
		t.Errorf("relative cache dir: %+v", r)
	}
}

// TestInUseBySpelling: a record keeps its file whichever way it names it.
func TestInUseBySpelling(t *testing.T) {
	for _, rec := range []catalog.JobRecord{
		{Job: "1", Source: goneSrc},                                       // only the source
		{Job: "2", Path: "/elsewhere/link/" + catalog.CacheName(goneSrc)}, // another spelling of the dir
	} {
		n := newNode(t)
		if err := catalog.WriteJobRecord(n.run, rec); err != nil {
			t.Fatal(err)
		}
		r := Run(n.opts(true))
		if f := find(t, r, catalog.CacheName(goneSrc)); f.Action != Kept || !n.exists(n.cachePath(goneSrc)) {
			t.Errorf("record %+v: %+v, want kept", rec, f)
		}
	}
}

// TestSymlinkedParentCannotRedirect: the cache directory is opened once;
// swapping it for a symlink to elsewhere after that does not send the
// removal there.
func TestSwappedCacheDir(t *testing.T) {
	n := newNode(t)
	gone := catalog.CacheName(goneSrc)
	// A twin of the garbage outside the cache.
	twin := filepath.Join(n.outside, gone)
	n.write(twin, 200)
	root, err := os.OpenRoot(n.cache)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	g := &run{opt: n.opts(true), root: root, wanted: catalog.WantedCacheNames(n.cat.Models), inUse: map[string]string{}}
	moved := n.cache + ".moved"
	if err := os.Rename(n.cache, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(n.outside, n.cache); err != nil {
		t.Fatal(err)
	}
	f, fi := g.judge(gone, false, "")
	if f = g.remove(f, fi); f.Action != Removed {
		t.Fatalf("judge = %+v", f)
	}
	if !n.exists(twin) {
		t.Error("the removal followed the swapped path out of the cache")
	}
	if n.exists(filepath.Join(moved, gone)) {
		t.Error("the file in the opened directory is still there")
	}
}

// TestImportsStayLeaf: the Epilog links this package, so it must stay
// standard library plus weights/catalog (and catalog's reflection-free JSON
// reader, internal/jsonlite, itself standard library only), without net/http.
func TestImportsStayLeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != "github.com/llmgw/llmgw/weights/catalog" && dep != "github.com/llmgw/llmgw/weights/gc" && dep != "github.com/llmgw/llmgw/internal/jsonlite" {
			t.Errorf("weights/gc depends on %s: it must import only the standard library and weights/catalog", dep)
		}
	}
	out, err = exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || dep == "os/exec" {
			t.Errorf("weights/gc depends on %s, which the hook binary must not link for it", dep)
		}
	}
}

// TestDeadline: past its deadline a run removes nothing more, and says so.
func TestDeadline(t *testing.T) {
	n := newNode(t)
	o := n.opts(true)
	o.Deadline = time.Now().Add(-time.Second)
	r := Run(o)
	if r.Count(Removed) != 0 || !n.exists(n.cachePath(goneSrc)) {
		t.Fatalf("a run past its deadline removed %d files", r.Count(Removed))
	}
	if f := find(t, r, catalog.CacheName(goneSrc)); f.Action != Kept || !strings.Contains(f.Reason, "time bound") {
		t.Errorf("past the deadline: %+v, want kept for lack of time", f)
	}
	o.Deadline = time.Now().Add(time.Minute)
	if r := Run(o); r.Count(Removed) != 2 {
		t.Errorf("a run within its deadline removed %d files, want both unwanted ones", r.Count(Removed))
	}
}

// TestRecentFetchKept: a file written within Options.Recent is kept even
// when no catalog entry wants it and no record names it: it may be what a
// Prolog fetched against a catalog newer than the node's copy, for a job
// that has already ended.
func TestRecentFetchKept(t *testing.T) {
	n := newNode(t)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(n.cachePath(usedSrc), old, old)
	opt := n.opts(true)
	opt.Recent = 10 * time.Minute
	r := Run(opt)
	if f := find(t, r, filepath.Base(n.cachePath(goneSrc))); f.Action != Kept || !strings.Contains(f.Reason, "fetched within the last 10m0s") {
		t.Errorf("a file written just now: %+v; want it kept as fetched within the gc interval", f)
	}
	if f := find(t, r, filepath.Base(n.cachePath(usedSrc))); f.Action != Removed {
		t.Errorf("a file written an hour ago: %+v; want it removed", f)
	}
}

// TestMaxShare: a run that would remove more than MaxShare percent of the
// cache's bytes removes nothing and says so, in a listing too; Force, or a
// bound it stays within, collects.
func TestMaxShare(t *testing.T) {
	n := newNode(t) // kept 100, gone 200, used 300 bytes: 500 of 600 unwanted
	opt := n.opts(true)
	opt.MaxShare = 50
	r := Run(opt)
	if r.Count(Removed) != 0 || !strings.Contains(r.Held, "500 B of the cache's 600 B (83%), more than gc_max_share (50%)") || !strings.Contains(r.Held, "--force") {
		t.Fatalf("over the share: removed %d, held %q", r.Count(Removed), r.Held)
	}
	if f := find(t, r, filepath.Base(n.cachePath(goneSrc))); f.Action != Kept || f.Reason != r.Held {
		t.Errorf("gone over the share: %+v", f)
	}
	list := n.opts(false)
	list.MaxShare = 50
	if r := Run(list); r.Held == "" || find(t, r, filepath.Base(n.cachePath(goneSrc))).Action != Listed {
		t.Errorf("a listing over the share: held %q, files %+v; want it listed and the hold said", r.Held, r.Files)
	}
	opt.MaxShare = 90
	if r := Run(opt); r.Count(Removed) != 2 || r.Held != "" {
		t.Errorf("within a 90%% share: removed %d, held %q", r.Count(Removed), r.Held)
	}
	n = newNode(t)
	opt = n.opts(true)
	opt.MaxShare, opt.Force = 50, true
	if r := Run(opt); r.Count(Removed) != 2 || r.Held != "" {
		t.Errorf("forced: removed %d, held %q", r.Count(Removed), r.Held)
	}
}

// TestDistrustedCatalog: against a catalog of another identity, or an
// older generation of the trusted one, nothing is removed unless forced.
func TestDistrustedCatalog(t *testing.T) {
	for _, tc := range []struct {
		id   string
		gen  int64
		held string
	}{
		{"other", 9, "has identity other, not mine"},
		{"mine", 3, "generation 3, older than generation 4"},
		{"mine", 4, ""},
		{"mine", 5, ""},
	} {
		n := newNode(t)
		n.cat.CatalogID, n.cat.Generation, n.cat.TrustedID, n.cat.TrustedGeneration = tc.id, tc.gen, "mine", 4
		r := Run(n.opts(true))
		if tc.held == "" {
			if r.Held != "" || r.Count(Removed) != 2 {
				t.Errorf("%s@%d: held %q, removed %d; want the trusted catalog collected", tc.id, tc.gen, r.Held, r.Count(Removed))
			}
			continue
		}
		if !strings.Contains(r.Held, tc.held) || r.Count(Removed) != 0 {
			t.Errorf("%s@%d: held %q, removed %d; want nothing removed, held for %q", tc.id, tc.gen, r.Held, r.Count(Removed), tc.held)
		}
		opt := n.opts(true)
		opt.Force = true
		if r := Run(opt); r.Held != "" || r.Count(Removed) != 2 {
			t.Errorf("%s@%d forced: held %q, removed %d", tc.id, tc.gen, r.Held, r.Count(Removed))
		}
	}
}

// TestStaleParts: a fetch left behind is garbage, listed like any other:
// its source no longer wanted, or untouched for PartMaxAge. A live fetch,
// or a recent one of a wanted source, is left alone.
func TestStaleParts(t *testing.T) {
	n := newNode(t)
	hour, week := time.Now().Add(-time.Hour), time.Now().Add(-8*24*time.Hour)
	unwanted := n.cachePath("https://origin.example/dropped.gguf")
	for _, s := range []string{catalog.PartSuffix, catalog.RangesSuffix} {
		n.write(unwanted+s, 50)
		os.Chtimes(unwanted+s, hour, hour)
	}
	live := n.cachePath("https://origin.example/live.gguf") + catalog.PartSuffix
	n.write(live, 60)
	wantedOld, wantedNew := n.cachePath(keptSrc)+catalog.PartSuffix, n.cachePath("https://origin.example/new.gguf")+catalog.PartSuffix
	n.cat.Models = append(n.cat.Models, catalog.Model{Name: "new", Source: "https://origin.example/new.gguf"})
	n.write(wantedOld, 70)
	os.Chtimes(wantedOld, week, week)
	n.write(wantedNew, 80)
	os.Chtimes(wantedNew, hour, hour)

	opt := n.opts(false)
	opt.PartMaxAge = 7 * 24 * time.Hour
	r := Run(opt)
	for _, p := range []string{unwanted + catalog.PartSuffix, unwanted + catalog.RangesSuffix} {
		if f := find(t, r, filepath.Base(p)); f.Action != Listed || !strings.Contains(f.Reason, "no catalog entry wants its source") {
			t.Errorf("%s: %+v; want it listed as a fetch left behind", filepath.Base(p), f)
		}
	}
	if f := find(t, r, filepath.Base(wantedOld)); f.Action != Listed || !strings.Contains(f.Reason, "longer than gc_part_max_age") {
		t.Errorf("a wanted source's .part untouched for 8 days: %+v", f)
	}
	for _, p := range []string{live, wantedNew} {
		if hasEntry(r, filepath.Base(p)) {
			t.Errorf("%s is listed: %+v", filepath.Base(p), find(t, r, filepath.Base(p)))
		}
	}
	opt.Collect = true
	opt.MaxShare = 100
	r = Run(opt)
	if r.Count(Removed) != 5 { // gone, used, and the three fetches left behind
		t.Errorf("collect removed %d: %+v", r.Count(Removed), r.Files)
	}
	for p, want := range map[string]bool{unwanted + catalog.PartSuffix: false, unwanted + catalog.RangesSuffix: false, wantedOld: false, live: true, wantedNew: true} {
		if n.exists(p) != want {
			t.Errorf("%s exists = %v after collect, want %v", filepath.Base(p), !want, want)
		}
	}
}
