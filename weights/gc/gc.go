// Package gc is the node's side of llmgw's garbage collection: it decides,
// on the node and from the node's own disk, which files in the fetch cache
// may go, and removes them when told to collect.
//
// The rules are the seed's, kept exactly, plus what a node running jobs
// needs on top:
//
//   - only entries directly inside the cache directory, named by a plain
//     file name: no separator, no "..", no absolute path;
//   - only cache names (catalog.IsCacheName): what catalog.CachePathFor gives
//     some source. Anything else was put there by someone else and is none
//     of llmgw's business, however unreferenced it looks;
//   - only names no catalog entry wants (catalog.CacheName of every remote
//     source in the node's catalog copy);
//   - never a symlink, and no directory but a set directory (a model of
//     several files, weights/catalog/set.go) whose manifest names it: only
//     regular files and such directories, looked at without following
//     links; a set directory goes whole or not at all, never one file of it;
//   - never the .part or .part.ranges of a fetch in progress: one written
//     within partQuiet, or of a source the catalog wants and touched within
//     PartMaxAge. A fetch left behind (its source no longer wanted, or
//     untouched for PartMaxAge) is garbage, listed like any other;
//   - never weights a job still running on this node uses (its record under
//     the run directory names them), and nothing at all when a record cannot
//     be read, since then gc cannot rule any file out;
//   - never a file written within Options.Recent (the gc interval): a Prolog
//     may have fetched it against a catalog newer than the node's copy, for
//     a job that has ended since;
//   - nothing at all when the catalog cannot be read, or reads as empty
//     while the node holds fetched weights: an empty catalog is far more
//     often a fault (a wiped database, a wrong coordinator) than an operator
//     who removed every model, and the cost of being wrong is refetching
//     everything;
//   - nothing at all, unless forced, when the catalog is not the one the
//     node trusts (another identity, an older generation: catalog.Copy's
//     Distrust), or when the run would remove more than MaxShare percent of
//     the cache's bytes: the same fault, short of emptying the catalog.
//
// A coordinator may name the files it wants removed (Options.Only); the
// node applies every rule above to each name anyway. The control plane
// knows the catalog, the node knows its disk, and a control plane that is
// wrong, newer than the agent or tampered with must not be able to talk a
// node into deleting something.
//
// The package imports only the standard library and weights/catalog: the
// Epilog, which runs at the end of every job, links it.
package gc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// What gc did with one file. The node decides: a file it was asked to
// remove may be kept or refused, and that is the rules working.
const (
	// Listed: no catalog entry wants it and nothing holds it; a gc with
	// Collect would remove it.
	Listed = "listed"
	// Removed: it was unlinked.
	Removed = "removed"
	// Kept: it is garbage by name, but is not removed now (a running job
	// uses it, or gc cannot tell, or the catalog cannot be trusted). A
	// later gc may remove it.
	Kept = "kept"
	// Refused: it is not gc's to remove, ever, as it stands (not a cache
	// name, outside the cache, a symlink, a fetch in progress, wanted by the
	// catalog, or no such file).
	Refused = "refused"
	// Failed: it was to be removed and the unlink failed.
	Failed = "failed"
)

// Options is one gc run. The zero value of each field is documented.
type Options struct {
	// CacheDir is the agent's fetch cache. Required, absolute.
	CacheDir string
	// Catalog is the node's catalog copy (catalog.ReadCopy of the agent's
	// catalog.json), and CatalogErr the error reading it gave, if any. With
	// CatalogErr set, nothing is removed.
	Catalog    catalog.Copy
	CatalogErr error
	// RunDir is where the hooks keep their job records (default
	// catalog.DefaultRunDir). A weight file a record names is in use.
	RunDir string
	// Collect removes what may go. Without it gc only lists: the default,
	// because deleting a model is the one thing here that cannot be undone
	// by running again.
	Collect bool
	// Only restricts the run to these names: what a coordinator asked this
	// node to remove. Each is checked like any other, and one that is not a
	// plain cache name in the cache directory is refused and reported. Nil
	// means every unwanted cache file in the directory; an empty, non-nil
	// slice means none.
	Only []string
	// Force collects against a catalog the node does not trust and beyond
	// MaxShare: `llmgw gc --collect --force`, an operator's word that the
	// catalog is right. It never overrides a rule about a single file.
	Force bool
	// MaxShare is the most of the cache, in percent of the bytes of its
	// cache files, that a run may remove (0 or 100: no bound). A run that
	// would remove more removes nothing and says so, unless Force.
	MaxShare int
	// PartMaxAge is how long a fetch's .part and .part.ranges may sit
	// untouched before gc takes them even for a source the catalog wants
	// (zero: never for their age). A later fetch would resume them, but one
	// nobody resumed in that long holds disk for nobody.
	PartMaxAge time.Duration
	// Recent keeps every file modified within it before now, wanted or
	// not (zero keeps none for its age). The Epilog passes gc_interval: a
	// Prolog that resolved a model at the coordinator may have fetched it
	// before the node's catalog copy learnt of it, and its job may have
	// ended (its record gone) before this gc.
	Recent time.Duration
	// Deadline, when set, bounds the run: once it has passed, no further
	// file is removed (each is kept, saying so) and the run returns. The
	// Epilog sets it so that job end is never held up by a slow unlink.
	Deadline time.Time

	// evict is set by Evict: a wanted name may go.
	evict bool
	// HFCache is the node's Hugging Face cache (agent.toml's hf_cache),
	// whose old revisions of Hub models the node's own gc judges too (see
	// hub.go); "" judges none.
	HFCache string
}

// File is what gc did with one file, and why.
type File struct {
	// Name is the name as found in the cache directory, or as asked (Only),
	// verbatim: a refused "../etc/passwd" is reported as such.
	Name string `json:"name"`
	// Path is the file's path, CacheDir joined with Name, when Name is a
	// plain name; empty otherwise (gc never builds a path from a bad name).
	Path string `json:"path,omitempty"`
	// Asked says the coordinator named it (Options.Only).
	Asked  bool   `json:"asked,omitempty"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Size is the file's size when it was looked at; for Removed, the
	// bytes freed.
	Size int64 `json:"size_bytes,omitempty"`
}

// Result is one gc run's outcome.
type Result struct {
	CacheDir string `json:"cache_dir"`
	Collect  bool   `json:"collect"`
	// Files are in name order.
	Files []File `json:"files"`
	// Freed is the sum of the sizes of the files removed.
	Freed int64 `json:"freed_bytes"`
	// Held says why nothing was removed at all (catalog unreadable or
	// empty, a job record unreadable, the cache directory unreadable);
	// empty when gc could decide file by file.
	Held string `json:"held,omitempty"`
}

// Count returns how many files got action.
func (r Result) Count(action string) int {
	n := 0
	for _, f := range r.Files {
		if f.Action == action {
			n++
		}
	}
	return n
}

// Run applies the rules to the cache directory and, with Collect, removes
// what may go. It never returns an error: every problem is a Result that
// says what was not done and why, since its callers (the Epilog, the agent
// answering a coordinator) must report, not fail.
func Run(opt Options) Result {
	res := Result{CacheDir: opt.CacheDir, Collect: opt.Collect, Files: []File{}}
	if opt.RunDir == "" {
		opt.RunDir = catalog.DefaultRunDir
	}
	if !filepath.IsAbs(opt.CacheDir) {
		res.Held = fmt.Sprintf("cache directory %q is not an absolute path; nothing is removed", opt.CacheDir)
		res.Files = refuseAll(opt.Only, res.Held)
		return res
	}
	// Every later look at the directory goes through this handle: the
	// directory itself, opened once, not its path. Names are looked up
	// relative to it (fstatat, unlinkat), so a path component swapped for
	// a symlink after the checks cannot take a removal anywhere else.
	root, err := os.OpenRoot(opt.CacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		// No cache yet: nothing was ever fetched, so there is nothing to do;
		// asked names are missing like any other.
		res.Files = missingAll(opt.Only)
		return res
	}
	if err != nil {
		res.Held = fmt.Sprintf("cache directory cannot be opened (%v); nothing is removed", err)
		res.Files = refuseAll(opt.Only, res.Held)
		return res
	}
	defer root.Close()

	wanted := catalog.WantedCacheNames(opt.Catalog.Models)
	g := &run{opt: opt, root: root, wanted: wanted}

	// The names to judge: those asked, or every cache name in the directory.
	var names []string
	asked := opt.Only != nil
	if asked {
		names = dedupe(opt.Only)
	} else {
		names, err = g.cacheNames()
		if err != nil {
			res.Held = fmt.Sprintf("cache directory cannot be listed (%v); nothing is removed", err)
			return res
		}
	}

	// Reasons that hold everything. Each is computed before any file is
	// touched; a held run still judges every name, so the operator sees
	// what would have gone.
	switch {
	case opt.CatalogErr != nil:
		res.Held = fmt.Sprintf("the catalog copy cannot be read (%v), so gc cannot tell what is wanted; nothing is removed", opt.CatalogErr)
	case len(opt.Catalog.Models) == 0:
		// Only matters when the node holds fetched weights; with none there
		// is nothing to remove anyway, and the run says nothing. Unasked,
		// names is the listing already.
		listed, err := names, error(nil)
		if asked {
			listed, err = g.cacheNames()
		}
		if err != nil {
			res.Held = fmt.Sprintf("cache directory cannot be listed (%v); nothing is removed", err)
		} else if len(listed) > 0 {
			res.Held = "the catalog copy reads as empty while this node holds fetched weights; that is more likely a fault than a wish to remove every model, so nothing is removed"
		}
	}
	recs, recErr := catalog.ReadJobRecords(opt.RunDir)
	if res.Held == "" && recErr != nil {
		res.Held = fmt.Sprintf("job records in %s cannot all be read (%v), so gc cannot rule out that a running job uses a file; nothing is removed", catalog.JobsDir(opt.RunDir), recErr)
	}
	g.inUse, g.recs = inUse(recs), recs

	if res.Held == "" && !opt.Force {
		if why := opt.Catalog.Distrust(); why != "" {
			res.Held = why + "; nothing is removed until `llmgw gc --collect --force` says this catalog is right"
		}
	}

	// Every name is judged before any is removed: whether the run may
	// remove at all depends on how much it would remove.
	var judged []judgement
	var garbage int64
	for _, name := range names {
		f, fi := g.judge(name, asked, res.Held)
		if f.Action == "" {
			continue // a wanted file found by listing: not garbage, not news
		}
		if _, dropped := opt.Catalog.SupersededBy(name); f.Action == Listed && !dropped {
			// What an admin's own change dropped (models add over an
			// entry, models rm) was meant: it does not count against
			// gc_max_share, which guards against a catalog that shrank by
			// accident.
			garbage += f.Size
		}
		judged = append(judged, judgement{f, fi})
	}
	if res.Held == "" && !opt.Force && opt.MaxShare > 0 && opt.MaxShare < 100 && garbage > 0 {
		total, err := g.cacheBytes()
		switch {
		case err != nil:
			res.Held = fmt.Sprintf("cache directory cannot be listed (%v), so gc cannot tell what share of it would go; nothing is removed", err)
		case garbage*100 > total*int64(opt.MaxShare):
			res.Held = fmt.Sprintf("this would remove %s of the cache's %s (%d%%), more than gc_max_share (%d%%) in one run: a catalog that lost that much is more likely wrong than meant; nothing is removed until `llmgw gc --collect --force`",
				catalog.FormatBytes(garbage), catalog.FormatBytes(total), garbage*100/max(total, 1), opt.MaxShare)
		}
	}
	for _, j := range judged {
		f := j.file
		if f.Action == Listed {
			switch {
			case !opt.Collect:
				// A listing says what would go; Held says what stops it.
			case res.Held != "":
				f.Action, f.Reason = Kept, res.Held
			case !opt.Deadline.IsZero() && !time.Now().Before(opt.Deadline):
				f.Action, f.Reason = Kept, "gc ran out of its time bound before this file; the next gc looks again"
			default:
				f = g.remove(f, j.info)
			}
		}
		if f.Action == Removed {
			res.Freed += f.Size
		}
		res.Files = append(res.Files, f)
	}
	if !asked {
		for _, f := range append(g.hubRevisions(res.Held), g.hubStaging(res.Held)...) {
			if f.Action == Removed {
				res.Freed += f.Size
			}
			res.Files = append(res.Files, f)
		}
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Name < res.Files[j].Name })
	return res
}

// judgement is one file as judged, with what it was when judged.
type judgement struct {
	file File
	info fs.FileInfo
}

type run struct {
	opt    Options
	root   *os.Root
	wanted map[string]string // cache name → model that wants it
	inUse  map[string]string // cache name or weight path → job using it
	recs   []catalog.JobRecord
}

// inUse indexes the job records by every spelling of what they use: the
// path they name, its file name, and the cache name of their source. A
// match on any of them keeps the file: a record written against a cache
// dir spelt differently (a symlinked parent, a changed config) must still
// protect its job.
func inUse(recs []catalog.JobRecord) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		job := "job " + r.Job
		if r.Path != "" {
			m[filepath.Clean(r.Path)] = job
			m[filepath.Base(r.Path)] = job
		}
		if catalog.KindOf(r.Source) == catalog.KindRemote {
			m[catalog.CacheName(r.Source)] = job
		}
		if r.Set != "" {
			m[r.Set] = job
		}
	}
	return m
}

// cacheNames lists the names in the cache directory that are cache names.
// The rest (an operator's file, a fetch in progress, a lock) is not
// listed: it is not gc's, and saying so about every one would bury what is.
func (g *run) cacheNames() ([]string, error) {
	ents, err := fs.ReadDir(g.root.FS(), ".")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if _, partial := partialOf(e.Name()); partial || catalog.IsCacheName(e.Name()) {
			out = append(out, e.Name())
		}
		// A wanted set's fetches left behind inside it: an unwanted set
		// goes whole, .part files and all.
		if _, wanted := g.wanted[e.Name()]; wanted && e.IsDir() && catalog.IsSetName(e.Name()) {
			inner, err := fs.ReadDir(g.root.FS(), e.Name())
			if err != nil {
				continue
			}
			for _, ie := range inner {
				if isPartialFile(ie.Name()) {
					out = append(out, e.Name()+"/"+ie.Name())
				}
			}
		}
	}
	return out, nil
}

// isPartialFile says whether name is a fetch's .part, .part.ranges or
// .part.ranges.tmp (inside a set directory, where files keep their own
// names).
func isPartialFile(name string) bool {
	return catalog.IsPartialName(name) || strings.HasSuffix(name, catalog.RangesTmpSuffix)
}

// nestedPartial splits name when it is a fetch's file inside a set
// directory, "SET/FILE.part": exactly one separator, a set's name before
// it and a partial file's plain name after it.
func nestedPartial(name string) (set, file string, ok bool) {
	set, file, found := strings.Cut(name, "/")
	if !found || strings.Contains(file, "/") || !catalog.IsSetName(set) || badName(set) != "" || badName(file) != "" || !isPartialFile(file) {
		return "", "", false
	}
	return set, file, true
}

// partQuiet is how long a fetch's files must sit unwritten before gc
// judges them at all: a fetch running writes its .part continuously and
// its .part.ranges every few MiB, so one touched this recently is live,
// whatever its source.
const partQuiet = 10 * time.Minute

// partialOf returns the cache name a fetch's .part, .part.ranges or
// .part.ranges.tmp file belongs to.
func partialOf(name string) (string, bool) {
	for _, suffix := range []string{catalog.RangesTmpSuffix, catalog.RangesSuffix, catalog.PartSuffix} {
		if base, ok := strings.CutSuffix(name, suffix); ok && catalog.IsCacheName(base) {
			return base, true
		}
	}
	return "", false
}

// cacheBytes sums the sizes of the regular cache files in the directory,
// wanted or not: the cache a share is of.
func (g *run) cacheBytes() (int64, error) {
	names, err := g.cacheNames()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		fi, err := g.root.Lstat(name)
		switch {
		case err != nil:
		case fi.Mode().IsRegular():
			n += fi.Size()
		case fi.IsDir() && catalog.IsSetName(name):
			if st, err := g.setStat(name); err == nil {
				n += st.size
			}
		}
	}
	return n, nil
}

// judge applies the rules to one name: Listed when it may go, with what
// it was when judged, for remove to check again. held, when set, keeps
// every file, and is the reason given.
func (g *run) judge(name string, asked bool, held string) (File, fs.FileInfo) {
	f := File{Name: name, Asked: asked}
	if set, _, ok := nestedPartial(name); ok {
		f.Path = filepath.Join(g.opt.CacheDir, name)
		return g.judgeNestedPartial(f, set)
	}
	if why := badName(name); why != "" {
		f.Action, f.Reason = Refused, why
		return f, nil
	}
	f.Path = filepath.Join(g.opt.CacheDir, name)
	if base, partial := partialOf(name); partial {
		return g.judgePartial(f, base)
	}
	if !catalog.IsCacheName(name) {
		f.Action, f.Reason = Refused, notCacheName(name)
		return f, nil
	}
	if m, ok := g.wanted[name]; ok && !g.opt.evict {
		if !asked {
			return File{}, nil // wanted and found by listing: leave it unsaid
		}
		f.Action, f.Reason = Refused, fmt.Sprintf("the catalog wants it (model %s)", m)
		return f, nil
	}
	if catalog.IsSetName(name) {
		if fi, err := g.root.Lstat(name); err == nil && fi.IsDir() {
			return g.judgeSet(f, fi, held)
		}
	}
	fi, refused := g.look(&f)
	if refused {
		return f, nil
	}
	why := "no catalog entry wants it; gc --collect would remove it"
	if m, ok := g.opt.Catalog.SupersededBy(name); ok {
		why = fmt.Sprintf("an admin's change dropped it from model %s (not counted against gc_max_share); gc --collect would remove it", m)
	}
	return g.keepOrList(f, fi, fi.ModTime(), held, why)
}

// keepOrList ends the judgement of an unwanted cache entry f, found as fi
// and last written at written: kept while a job uses it, while it is
// recent, or while held; else listed, saying listed.
func (g *run) keepOrList(f File, fi fs.FileInfo, written time.Time, held, listed string) (File, fs.FileInfo) {
	for _, key := range []string{f.Name, f.Path} {
		if job, ok := g.inUse[key]; ok {
			f.Action, f.Reason = Kept, "in use by "+job+" on this node"
			return f, nil
		}
	}
	if g.opt.Recent > 0 && time.Since(written) < g.opt.Recent {
		f.Action, f.Reason = Kept, fmt.Sprintf("fetched within the last %s (the gc interval): a job may have fetched it against a newer catalog than this node's copy; it can go after %s, --force or not",
			g.opt.Recent, written.Add(g.opt.Recent).UTC().Format(time.RFC3339))
		return f, nil
	}
	if held != "" {
		f.Action, f.Reason = Kept, held
		return f, fi
	}
	f.Action, f.Reason = Listed, listed
	return f, fi
}

// judgeSet judges the set directory of a model of several files
// (weights/catalog/set.go), found as fi, which no catalog entry wants. A
// set is collected whole or not at all: never one file of it, since a set
// missing a file is a set no engine can load and the next job refetches
// the file anyway. It must prove llmgw made it (a manifest that names it),
// hold no fetch in progress, and be kept like a single file when a job
// uses it or it was written within Recent; the newest of its files
// decides its age.
func (g *run) judgeSet(f File, fi fs.FileInfo, held string) (File, fs.FileInfo) {
	st, err := g.setStat(f.Name)
	if err != nil {
		f.Action, f.Reason = Refused, err.Error()
		return f, nil
	}
	f.Size = st.size
	if st.live {
		if !f.Asked {
			return File{}, nil // a fetch in progress found by listing: not news
		}
		f.Action, f.Reason = Refused, "a set directory with a fetch in progress (.part): not garbage"
		return f, nil
	}
	return g.keepOrList(f, fi, st.newest, held, "a model of several files no catalog entry wants; gc --collect would remove its directory whole")
}

// setStat is what gc needs to know of a set directory.
type setStat struct {
	size   int64     // of its regular files
	newest time.Time // the latest modification of any entry, the directory's own included
	live   bool      // a .part or ranges file written within partQuiet
}

// setStat reads the set directory name through the cache directory's
// handle, without following a link, and refuses it (the error says why)
// unless its manifest proves llmgw made it for exactly that name.
func (g *run) setStat(name string) (setStat, error) {
	var st setStat
	sub, err := g.root.OpenRoot(name)
	if err != nil {
		return st, fmt.Errorf("cannot open the set directory: %v", err)
	}
	defer sub.Close()
	b, err := sub.ReadFile(catalog.SetManifest)
	if err != nil {
		return st, fmt.Errorf("a directory without a readable set manifest (%s): llmgw did not make it, so it is not llmgw's to remove", catalog.SetManifest)
	}
	man, err := catalog.ParseManifest(b)
	if err != nil || man.Name() != name {
		return st, fmt.Errorf("a directory whose set manifest (%s) does not name it: llmgw did not make it, so it is not llmgw's to remove", catalog.SetManifest)
	}
	ents, err := fs.ReadDir(sub.FS(), ".")
	if err != nil {
		return st, fmt.Errorf("cannot list the set directory: %v", err)
	}
	if dfi, err := sub.Lstat("."); err == nil {
		st.newest = dfi.ModTime()
	}
	for _, e := range ents {
		fi, err := sub.Lstat(e.Name())
		if err != nil {
			continue
		}
		if fi.ModTime().After(st.newest) {
			st.newest = fi.ModTime()
		}
		if fi.Mode().IsRegular() {
			st.size += fi.Size()
		}
		if (catalog.IsPartialName(e.Name()) || strings.HasSuffix(e.Name(), catalog.RangesTmpSuffix)) && time.Since(fi.ModTime()) < partQuiet {
			st.live = true
		}
	}
	return st, nil
}

// look finds f in the cache directory, without following a link, and
// refuses it (true) when it is not there or not a regular file; else it
// sets f.Size.
func (g *run) look(f *File) (fs.FileInfo, bool) {
	fi, err := g.root.Lstat(f.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.Action, f.Reason = Refused, "no such file in the cache directory"
		return nil, true
	case err != nil:
		f.Action, f.Reason = Refused, fmt.Sprintf("cannot look at it: %v", err)
		return nil, true
	}
	if why := notRegular(fi); why != "" {
		f.Action, f.Reason = Refused, why
		return nil, true
	}
	f.Size = fi.Size()
	return fi, false
}

// judgePartial judges a fetch's .part or ranges file, whose cache name is
// base: a live fetch, or one of a wanted source not yet PartMaxAge old, is
// not garbage; one left behind is, unless a job uses its source.
func (g *run) judgePartial(f File, base string) (File, fs.FileInfo) {
	fi, refused := g.look(&f)
	if refused {
		return f, nil
	}
	age := time.Since(fi.ModTime())
	m, wanted := g.wanted[base]
	stale := g.opt.PartMaxAge > 0 && age >= g.opt.PartMaxAge
	if age < partQuiet || age < g.opt.Recent || wanted && !stale {
		if !f.Asked {
			return File{}, nil // a fetch in progress found by listing: not news
		}
		f.Action, f.Reason = Refused, notCacheName(f.Name)
		return f, nil
	}
	for _, key := range []string{base, filepath.Join(g.opt.CacheDir, base)} {
		if job, ok := g.inUse[key]; ok {
			f.Action, f.Reason = Kept, "a fetch for "+job+" on this node"
			return f, nil
		}
	}
	why := "a fetch left behind: no catalog entry wants its source"
	if wanted {
		why = fmt.Sprintf("a fetch left behind: untouched for %s, longer than gc_part_max_age (%s), though model %s wants its source", age.Round(time.Hour), g.opt.PartMaxAge, m)
	}
	f.Action, f.Reason = Listed, why+"; gc --collect would remove it"
	return f, fi
}

// judgeNestedPartial judges a fetch's file inside the set directory set:
// one left untouched for PartMaxAge goes, as at the top of the cache,
// though the catalog wants the set (an unwanted set goes whole instead);
// a live one is not garbage; one of a set a running job uses is kept.
func (g *run) judgeNestedPartial(f File, set string) (File, fs.FileInfo) {
	if dfi, err := g.root.Lstat(set); err != nil || !dfi.IsDir() {
		f.Action, f.Reason = Refused, "not inside a set directory of the cache (no such directory, or a symlink)"
		return f, nil
	}
	if _, wanted := g.wanted[set]; !wanted {
		f.Action, f.Reason = Refused, "inside a set no catalog entry wants: gc removes such a set whole, never one file of it"
		return f, nil
	}
	fi, refused := g.look(&f)
	if refused {
		return f, nil
	}
	age := time.Since(fi.ModTime())
	if age < partQuiet || age < g.opt.Recent || g.opt.PartMaxAge <= 0 || age < g.opt.PartMaxAge {
		if !f.Asked {
			return File{}, nil // a fetch in progress, or one not yet old: not news
		}
		f.Action, f.Reason = Refused, "a fetch in progress inside a set directory, or one not yet gc_part_max_age old: not garbage"
		return f, nil
	}
	if job, ok := g.inUse[set]; ok {
		f.Action, f.Reason = Kept, "a fetch for "+job+" on this node"
		return f, nil
	}
	f.Action, f.Reason = Listed, fmt.Sprintf("a fetch left behind inside the set directory of model %s: untouched for %s, longer than gc_part_max_age (%s); gc --collect would remove it",
		g.wanted[set], age.Round(time.Hour), g.opt.PartMaxAge)
	return f, fi
}

// remove unlinks f after looking at it once more, through the same
// directory handle: it must still be the regular file judged a moment ago
// (same inode), not something swapped in under its name.
func (g *run) remove(f File, judged fs.FileInfo) File {
	fi, err := g.root.Lstat(f.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.Action, f.Reason = Refused, "it went away before it could be removed"
		return f
	case err != nil:
		f.Action, f.Reason = Failed, fmt.Sprintf("cannot look at it again before removing it: %v", err)
		return f
	}
	if judged.IsDir() {
		return g.removeSet(f, fi, judged)
	}
	if why := notRegular(fi); why != "" {
		f.Action, f.Reason = Refused, why+" (it changed after it was judged)"
		return f
	}
	if !os.SameFile(fi, judged) {
		f.Action, f.Reason = Refused, "it was replaced after it was judged; the next gc judges it again"
		return f
	}
	f.Size = fi.Size()
	// Root.Remove is unlinkat relative to the directory handle: a plain
	// name there can only ever remove an entry of that directory.
	if err := g.root.Remove(f.Name); err != nil {
		f.Action, f.Reason = Failed, fmt.Sprintf("remove: %v", err)
		return f
	}
	if _, partial := partialOf(f.Name); partial {
		f.Action, f.Reason = Removed, strings.TrimSuffix(f.Reason, "; gc --collect would remove it")
		return f
	}
	if _, _, nested := nestedPartial(f.Name); nested {
		f.Action, f.Reason = Removed, strings.TrimSuffix(f.Reason, "; gc --collect would remove it")
		return f
	}
	f.Action, f.Reason = Removed, "no catalog entry wants it"
	return f
}

// removeSet removes the set directory f, judged as judged and found again
// as fi, whole: it must still be that directory (same inode, not a link),
// still hold no fetch in progress, and Root.RemoveAll then removes it
// through the cache directory's handle, never following a link inside.
func (g *run) removeSet(f File, fi, judged fs.FileInfo) File {
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() || !os.SameFile(fi, judged) {
		f.Action, f.Reason = Refused, "it was replaced after it was judged; the next gc judges it again"
		return f
	}
	st, err := g.setStat(f.Name)
	switch {
	case err != nil:
		f.Action, f.Reason = Refused, err.Error()+" (it changed after it was judged)"
		return f
	case st.live || g.opt.Recent > 0 && time.Since(st.newest) < g.opt.Recent:
		f.Action, f.Reason = Kept, "a fetch began in it after it was judged; the next gc judges it again"
		return f
	}
	if err := g.root.RemoveAll(f.Name); err != nil {
		f.Action, f.Reason = Failed, fmt.Sprintf("remove: %v", err)
		return f
	}
	f.Size = st.size
	f.Action, f.Reason = Removed, "no catalog entry wants this model of several files; its directory is removed whole"
	return f
}

// badName says why name cannot name an entry directly inside the cache
// directory, or "". A name from a coordinator is untrusted input: it is
// never joined to a path before this says it is plain.
func badName(name string) string {
	switch {
	case name == "":
		return "empty name"
	case strings.ContainsRune(name, 0):
		return "the name contains NUL"
	case filepath.IsAbs(name):
		return "an absolute path: gc removes only names inside its cache directory"
	case strings.ContainsRune(name, '/'), name == ".", name == "..":
		return "a path, not a file name: gc removes only names directly inside its cache directory, and never follows a traversal"
	}
	return ""
}

// notCacheName says why a plain name that is not a cache name is refused.
func notCacheName(name string) string {
	for _, suffix := range []string{catalog.RangesTmpSuffix, catalog.RangesSuffix, catalog.PartSuffix} {
		if base, ok := strings.CutSuffix(name, suffix); ok && catalog.IsCacheName(base) {
			return "a fetch in progress (" + suffix + "): not garbage"
		}
	}
	return "not a cache name: llmgw did not fetch it, so it is not llmgw's to remove"
}

// notRegular says why fi (from Lstat) is not a file gc may remove, or "".
func notRegular(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symlink: gc never follows or removes links"
	case m.IsDir():
		return "a directory: gc removes only the single files a fetch writes"
	case !m.IsRegular():
		return "not a regular file"
	}
	return ""
}

func dedupe(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// refuseAll answers every asked name with why, when the run cannot look.
func refuseAll(only []string, why string) []File {
	out := []File{}
	for _, n := range dedupe(only) {
		out = append(out, File{Name: n, Asked: true, Action: Refused, Reason: why})
	}
	return out
}

// missingAll answers every asked name when there is no cache directory:
// each is refused for its own reason (a bad name is still called bad).
func missingAll(only []string) []File {
	out := []File{}
	for _, n := range dedupe(only) {
		why := badName(n)
		if why == "" {
			why = "no such file: the cache directory does not exist"
		}
		out = append(out, File{Name: n, Asked: true, Action: Refused, Reason: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
