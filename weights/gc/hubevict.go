package gc

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Hub snapshots as eviction entries. A Hub model (weights/catalog/hub.go)
// lives in the node's Hugging Face cache, not in set directories: one
// snapshot directory per commit, whose links lead to blobs that several
// snapshots may share. Eviction takes a snapshot whole, as it takes a set:
//
//   - the snapshot of a catalog Hub model's commit is wanted by it; any
//     other snapshot of the model's repository is superseded (a repin
//     moved the model's ref on); a snapshot written after the node's
//     catalog copy was fetched counts as wanted, since a Prolog may have
//     fetched a commit newer than the copy;
//   - never a snapshot a job record names (its path, a file in it, or the
//     repository at that commit as its source), nor any snapshot of a
//     repository whose blobs a fetch is writing;
//   - only in a Hugging Face cache on the llmgw cache's filesystem: that
//     is the filesystem whose room eviction makes, and a cache on a filer
//     is read by other nodes' jobs, whose records this node cannot see
//     (gc's rule for old revisions, hub.go);
//   - only repositories of the catalog's Hub models: another repository
//     is someone else's downloads.
//
// Removing a snapshot removes its links, then the blobs no snapshot left
// links to (those of the catalog's commit stay while that snapshot is not
// the one removed: a fetch may be linking them), then the refs that named
// its commit. An entry's size is what that frees: the blobs it alone
// links, and those it shares, counted once, with the snapshot that would
// go last (the catalog's commit, else the newest), so that the entries add
// up to what the repository's blobs occupy.

// HubEntryName is the eviction entry name of repo's snapshot at commit:
// its path inside the Hugging Face cache. No cache name has a slash.
func HubEntryName(repo, commit string) string {
	return catalog.RepoFolder(repo) + "/snapshots/" + commit
}

// IsHubEntry says whether name is a Hub snapshot's entry name.
func IsHubEntry(name string) bool {
	_, _, ok := splitHubEntry(name)
	return ok
}

func splitHubEntry(name string) (folder, commit string, ok bool) {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || parts[1] != "snapshots" || !strings.HasPrefix(parts[0], "models--") || !catalog.ValidCommit(parts[2]) {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// hubModels maps the repository folder of each catalog Hub model to the
// model.
func hubModels(models []catalog.Model) map[string]catalog.Model {
	out := map[string]catalog.Model{}
	for _, m := range models {
		if m.IsHub() {
			out[catalog.RepoFolder(m.Hub.Repo)] = m
		}
	}
	return out
}

// hubRoot opens opt's Hugging Face cache when eviction may act in it:
// set, absolute, there, and on the llmgw cache's filesystem.
func hubRoot(opt Options) (*os.Root, string) {
	hf := opt.HFCache
	if hf == "" || !filepath.IsAbs(hf) {
		return nil, "no Hugging Face cache is configured"
	}
	if !sameFS(hf, opt.CacheDir) {
		return nil, "the Hugging Face cache (hf_cache) is on another filesystem than the llmgw cache, a filer's perhaps, whose snapshots other nodes' jobs may read"
	}
	root, err := os.OpenRoot(hf)
	if err != nil {
		return nil, err.Error()
	}
	return root, ""
}

// hubRepoView is what eviction sees of one repository's snapshots.
type hubRepoView struct {
	commits []string            // snapshot directories
	links   map[string][]string // commit → the blobs its links lead to
	users   map[string]int      // blob → how many snapshots link it
	written map[string]time.Time
	sizes   map[string]int64 // blob → bytes on disk
	live    bool             // a fetch writes into blobs/, or stages for it
}

// viewHubRepo is what eviction sees of folder in the Hugging Face cache
// root, and in the staging directory of the llmgw cache croot (nil: none).
func viewHubRepo(root, croot *os.Root, opt Options, folder string) hubRepoView {
	v := hubRepoView{links: map[string][]string{}, users: map[string]int{}, written: map[string]time.Time{}, sizes: map[string]int64{}}
	snaps, _ := fs.ReadDir(root.FS(), folder+"/snapshots")
	for _, e := range snaps {
		if !e.IsDir() || !catalog.ValidCommit(e.Name()) {
			continue
		}
		c := e.Name()
		dir := folder + "/snapshots/" + c
		fi, err := root.Lstat(dir)
		if err != nil {
			continue
		}
		v.commits = append(v.commits, c)
		v.written[c] = fi.ModTime()
		seen := map[string]bool{}
		fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 {
				if t, err := root.Readlink(p); err == nil && !seen[path.Base(t)] {
					seen[path.Base(t)] = true
					v.links[c] = append(v.links[c], path.Base(t))
					v.users[path.Base(t)]++
				}
				if li, err := root.Lstat(p); err == nil && li.ModTime().After(v.written[c]) {
					v.written[c] = li.ModTime()
				}
			}
			return nil
		})
	}
	blobs, _ := fs.ReadDir(root.FS(), folder+"/blobs")
	for _, e := range blobs {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if blobName(e.Name()) {
			v.sizes[e.Name()] = blocks(fi)
		} else if time.Since(fi.ModTime()) < partQuiet {
			v.live = true // a .part, or huggingface_hub's .incomplete
		}
	}
	// A fetch stages the repository's blobs in the llmgw cache first: one
	// writing there is live by gc's rules for staging (hubstaging.go).
	if croot != nil {
		for _, s := range stagedIn(croot, opt, nil, folder) {
			if s.state == stagedLive {
				v.live = true
			}
		}
	}
	return v
}

// owner is the snapshot a blob shared by several is counted with: the
// catalog's commit when it links the blob, else the newest that does.
func (v hubRepoView) owner(blob, current string) string {
	best := ""
	for _, c := range v.commits {
		if !contains(v.links[c], blob) {
			continue
		}
		if c == current {
			return c
		}
		if best == "" || v.written[c].After(v.written[best]) {
			best = c
		}
	}
	return best
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hubJob is the job whose record names repo's snapshot dir at commit, or "".
func hubJob(recs []catalog.JobRecord, repo, commit, dir string) string {
	src := catalog.HubSource(repo, commit)
	for _, r := range recs {
		p := filepath.Clean(r.Path)
		if r.Source == src || p == dir || strings.HasPrefix(p, dir+"/") {
			return "job " + r.Job
		}
	}
	return ""
}

// hubEntries lists the snapshots of the catalog's Hub models in opt's
// Hugging Face cache as eviction entries (see the comment above); croot
// is the llmgw cache, whose staging directory says which are fetching.
func hubEntries(opt Options, croot *os.Root, recs []catalog.JobRecord) []Entry {
	models := hubModels(opt.Catalog.Models)
	if len(models) == 0 {
		return nil
	}
	root, _ := hubRoot(opt)
	if root == nil {
		return nil
	}
	defer root.Close()
	var out []Entry
	for folder, m := range models {
		h := *m.Hub
		if plantedFolder(root, folder) != "" {
			continue // not judged through a planted link (gc says so)
		}
		v := viewHubRepo(root, croot, opt, folder)
		for _, c := range v.commits {
			var size int64
			for _, b := range v.links[c] {
				if v.users[b] == 1 || v.owner(b, h.Commit) == c {
					size += v.sizes[b]
				}
			}
			name := folder + "/snapshots/" + c
			p := filepath.Join(opt.HFCache, name)
			e := Entry{Name: name, Path: p, Size: size, Written: v.written[c], Fetching: v.live, InUse: hubJob(recs, h.Repo, c, p)}
			if c == h.Commit || !v.written[c].Before(opt.Catalog.Fetched) {
				e.Wanted = m.Name
			} else {
				e.Superseded = m.Name
			}
			out = append(out, e)
		}
	}
	return out
}

// evictHub removes the Hub snapshots named, each for its reason, after
// judging each again as hubEntries did, with the job records recs read
// just now; a snapshot written within opt.Recent stays (its Prolog has
// yet to write the record that names it).
func evictHub(opt Options, recs []catalog.JobRecord, names []string, reasons map[string]string) []File {
	var out []File
	root, why := hubRoot(opt)
	if root != nil {
		defer root.Close()
	}
	models := hubModels(opt.Catalog.Models)
	g := &run{opt: opt, recs: recs}
	if croot, err := os.OpenRoot(opt.CacheDir); err == nil {
		defer croot.Close()
		g.root = croot
	}
	for _, name := range names {
		folder, commit, _ := splitHubEntry(name)
		f := File{Name: name, Path: filepath.Join(opt.HFCache, name)}
		m, ok := models[folder]
		switch {
		case root == nil:
			f.Action, f.Reason = Kept, why
		case !ok:
			f.Action, f.Reason = Kept, "not a snapshot of a catalog Hub model's repository"
		default:
			f = g.evictSnapshot(root, f, *m.Hub, folder, commit, reasons[name])
		}
		out = append(out, f)
	}
	return out
}

// evictSnapshot removes h's repository's snapshot at commit, then what it
// alone held.
func (g *run) evictSnapshot(root *os.Root, f File, h catalog.Hub, folder, commit, reason string) File {
	if d := plantedFolder(root, folder); d != "" {
		f.Action, f.Reason = Kept, filepath.Join(g.opt.HFCache, d)+" is a symbolic link or a file where a folder of "+h.Repo+" belongs: eviction removes nothing through one; remove it"
		return f
	}
	v := viewHubRepo(root, g.root, g.opt, folder)
	if !contains(v.commits, commit) {
		f.Action, f.Reason = Kept, "no such snapshot any more"
		return f
	}
	switch {
	case hubJob(g.recs, h.Repo, commit, f.Path) != "":
		f.Action, f.Reason = Kept, "in use by "+hubJob(g.recs, h.Repo, commit, f.Path)
		return f
	case v.live:
		f.Action, f.Reason = Kept, "a fetch is writing blobs of "+h.Repo
		return f
	case g.opt.Recent > 0 && time.Since(v.written[commit]) < g.opt.Recent:
		f.Action, f.Reason = Kept, fmt.Sprintf("written within the last %s: the job that fetched it has yet to record it", g.opt.Recent)
		return f
	case !g.opt.Deadline.IsZero() && !time.Now().Before(g.opt.Deadline):
		f.Action, f.Reason = Kept, "eviction ran out of its time bound before this snapshot"
		return f
	}
	// Looked at again right before: a link planted since the view would
	// turn the removal into another repository.
	if d := plantedFolder(root, folder); d != "" {
		f.Action, f.Reason = Kept, filepath.Join(g.opt.HFCache, d)+" became a symbolic link or a file as eviction judged "+h.Repo+": nothing removed through it"
		return f
	}
	if fi, err := root.Lstat(f.Name); err != nil || !fi.IsDir() {
		f.Action, f.Reason = Kept, "the snapshot is no directory any more (a link planted in its place?): nothing removed through it"
		return f
	}
	if err := root.RemoveAll(f.Name); err != nil {
		f.Action, f.Reason = Failed, err.Error()
		return f
	}
	keep := map[string]bool{}
	for _, c := range v.commits {
		if c != commit {
			keep[c] = true
		}
	}
	// The catalog commit's listed blobs stay unless its own snapshot is
	// the one that goes: a fetch may have written them and not linked
	// them yet.
	if commit == h.Commit {
		h.Files = nil
	}
	f.Action, f.Reason = Removed, "evicted: "+reason
	for _, b := range g.hubLeftovers(root, folder, h, keep, []string{commit}) {
		if b.Action == Removed {
			f.Size += v.sizes[path.Base(b.Name)]
		}
	}
	return f
}
