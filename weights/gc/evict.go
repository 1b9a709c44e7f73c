package gc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Eviction (weights/evict) decides what a full cache gives up; this file
// is what it stands on here: Entries, the cache as eviction sees it, and
// Evict, the removal, through every rule gc applies to a single file but
// "the catalog wants it". Wanted files may go under pressure: the order
// and the fabric's last copies are weights/evict's to judge, and the agent
// asks the coordinator before it removes one.

// Entry is one whole thing in the cache: a fetched file, a set
// directory (a model of several files), or a Hub model's snapshot in the
// Hugging Face cache (hubevict.go; its Name is HubEntryName's).
type Entry struct {
	Name string
	// Path is where it is.
	Path string
	// Size is its bytes on disk (blocks), what removing it frees.
	Size    int64
	Written time.Time
	// Wanted is the catalog model that wants it, or "".
	Wanted string
	// Superseded is the catalog model it is an older revision of (a Hub
	// snapshot of another commit than the catalog's), or "". A cache
	// file's superseding is the catalog copy's to say (Copy.SupersededBy).
	Superseded string
	// InUse is the job whose record names it, or "".
	InUse string
	// Fetching says a fetch is writing it, or in it: a .part touched
	// within partQuiet beside it or inside it.
	Fetching bool
}

// Entries lists the cache's entries (opt.CacheDir, opt.Catalog, opt.RunDir
// are used), and fails when the cache or the job records cannot be read:
// eviction then removes nothing, as gc would not.
func Entries(opt Options) ([]Entry, error) {
	if opt.RunDir == "" {
		opt.RunDir = catalog.DefaultRunDir
	}
	if !filepath.IsAbs(opt.CacheDir) {
		return nil, fmt.Errorf("cache directory %q is not an absolute path", opt.CacheDir)
	}
	root, err := os.OpenRoot(opt.CacheDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()
	recs, err := catalog.ReadJobRecords(opt.RunDir)
	if err != nil {
		return nil, fmt.Errorf("job records in %s cannot all be read (%v), so a running job's files cannot be told", catalog.JobsDir(opt.RunDir), err)
	}
	g := &run{opt: opt, root: root, wanted: catalog.WantedCacheNames(opt.Catalog.Models), inUse: inUse(recs)}
	names, err := g.cacheNames()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	var out []Entry
	for _, name := range names {
		if _, _, nested := nestedPartial(name); nested {
			continue // the set's own stat says whether a fetch is live in it
		}
		if base, partial := partialOf(name); partial {
			if fi, err := root.Lstat(name); err == nil && time.Since(fi.ModTime()) < partQuiet {
				live[base] = true
			}
			continue
		}
		fi, err := root.Lstat(name)
		if err != nil {
			continue
		}
		e := Entry{Name: name, Path: filepath.Join(opt.CacheDir, name), Wanted: g.wanted[name], Written: fi.ModTime()}
		switch {
		case fi.Mode().IsRegular():
			e.Size = blocks(fi)
		case fi.IsDir() && catalog.IsSetName(name):
			st, err := g.setStat(name)
			if err != nil {
				continue // not llmgw's: never evicted
			}
			e.Size, e.Written, e.Fetching = st.size, st.newest, st.live
		default:
			continue
		}
		for _, key := range []string{name, filepath.Join(opt.CacheDir, name)} {
			if job, ok := g.inUse[key]; ok {
				e.InUse = job
			}
		}
		out = append(out, e)
	}
	for i := range out {
		if live[out[i].Name] {
			out[i].Fetching = true
		}
	}
	out = append(out, hubEntries(opt, root, recs)...)
	out = append(out, stagedEntries(root, opt)...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// blocks is what fi occupies on disk; a sparse or preallocated file's
// apparent size is not what removing it frees.
func blocks(fi fs.FileInfo) int64 {
	if n, ok := allocatedOf(fi); ok {
		return n
	}
	return fi.Size()
}

// Evict removes the entries named, each for the reason given, applying
// again every rule gc applies to one file but the catalog's wanting it: a
// plain cache name directly in the cache directory, a regular file or a
// set directory whose manifest names it, no job record naming it (and
// nothing at all when the records cannot be read), no fetch under way in
// or beside it, and the same inode as when it was judged. Files written
// within justFetched are kept: a Prolog that fetched one has yet to
// write the record that names it.
//
// A Hub snapshot (IsHubEntry) is judged again by hubevict.go's rules, a
// file a Hub fetch left in staging (IsStagedEntry) by hubstaging.go's.
func Evict(opt Options, reasons map[string]string) Result {
	var names, hub, staged []string
	for n := range reasons {
		switch {
		case IsHubEntry(n):
			hub = append(hub, n)
		case IsStagedEntry(n):
			staged = append(staged, n)
		default:
			names = append(names, n)
		}
	}
	sort.Strings(hub)
	sort.Strings(staged)
	opt.Collect, opt.Force, opt.MaxShare = true, true, 0
	opt.Recent = justFetched
	opt.evict = true
	var res Result
	if len(names) > 0 {
		o := opt
		o.Only = names
		res = Run(o)
		for i := range res.Files {
			if f := &res.Files[i]; f.Action == Removed {
				f.Reason = "evicted: " + reasons[f.Name]
			}
		}
	}
	if len(hub) > 0 {
		recs, err := catalog.ReadJobRecords(opt.RunDir)
		if opt.RunDir == "" {
			recs, err = catalog.ReadJobRecords(catalog.DefaultRunDir)
		}
		var files []File
		if err != nil {
			for _, n := range hub {
				files = append(files, File{Name: n, Path: filepath.Join(opt.HFCache, n), Action: Kept,
					Reason: fmt.Sprintf("job records cannot all be read (%v), so a running job's snapshot cannot be told", err)})
			}
		} else {
			files = evictHub(opt, recs, hub, reasons)
		}
		for _, f := range files {
			if f.Action == Removed {
				res.Freed += f.Size
			}
			res.Files = append(res.Files, f)
		}
	}
	for _, f := range evictStaged(opt, staged, reasons) {
		if f.Action == Removed {
			res.Freed += f.Size
		}
		res.Files = append(res.Files, f)
	}
	return res
}

// justFetched is how long a file just fetched is kept from eviction: the
// Prolog that fetched it writes its job's record right after, and until
// then nothing names it in use.
const justFetched = 30 * time.Second
