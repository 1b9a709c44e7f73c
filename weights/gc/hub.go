package gc

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The old revisions of Hub models (weights/catalog/hub.go). A repin makes
// a new snapshot directory beside the old one, whose files a running job
// may still read; gc removes an old snapshot only once nothing can:
//
//   - only in the node's own Hugging Face cache (Options.HFCache), and only
//     when it is on the llmgw cache's filesystem: a cache on a filer is
//     read by other nodes' jobs, whose records this node cannot see;
//   - only in the repository of a Hub model of the node's catalog copy
//     (another repository is someone else's downloads), and never the
//     model's own commit;
//   - never a snapshot a job record on this node names (its path, or its
//     repository at that commit), nor one written within Options.Recent
//     (a Prolog may have fetched a commit newer than the node's copy), nor
//     anything while a reason holds the whole run;
//   - after the snapshots, the blobs no snapshot left links to and the
//     catalog's list does not name, and the refs that named a removed
//     commit; never a blob being written (.part, .incomplete) nor one
//     written within Recent;
//   - in the llmgw cache's staging directory, where Hub blobs are fetched
//     before they move into the Hugging Face cache, what fetches that
//     stopped left: by the rules of a fetch's .part (hubStaging).
//
// It runs only in the node's own gc (Options.Only nil): a coordinator
// names cache files, and knows nothing of a node's revisions.

// hubRevisions judges, and with Collect removes, the old revisions in the
// Hugging Face cache; held, when set, keeps everything and says why.
func (g *run) hubRevisions(held string) []File {
	hf := g.opt.HFCache
	if hf == "" || !filepath.IsAbs(hf) {
		return nil
	}
	current := map[string]catalog.Hub{} // repository folder → the model's revision
	for _, m := range g.opt.Catalog.Models {
		if m.IsHub() {
			current[catalog.RepoFolder(m.Hub.Repo)] = *m.Hub
		}
	}
	if len(current) == 0 {
		return nil
	}
	root, err := os.OpenRoot(hf)
	if err != nil {
		return nil // no Hugging Face cache: nothing fetched into it
	}
	defer root.Close()
	if held == "" && !sameFS(hf, g.opt.CacheDir) {
		held = "the Hugging Face cache (hf_cache) is on another filesystem than the llmgw cache, a filer's perhaps, whose old revisions other nodes' jobs may read; its admin removes them"
	}
	var out []File
	for folder, h := range current {
		out = append(out, g.hubRepo(root, folder, h, held)...)
	}
	return out
}

// hubRepo judges the snapshots, then the blobs and refs, of one repository.
func (g *run) hubRepo(root *os.Root, folder string, h catalog.Hub, held string) []File {
	if d := plantedFolder(root, folder); d != "" {
		return []File{{Name: d, Path: filepath.Join(g.opt.HFCache, d), Action: Kept,
			Reason: "a symbolic link or a file where a folder of " + h.Repo + " belongs: gc does not judge a repository through one; remove it"}}
	}
	snaps, err := fs.ReadDir(root.FS(), folder+"/snapshots")
	if err != nil {
		return nil
	}
	var out []File
	var gone []string
	keep := map[string]bool{} // snapshots that stay
	for _, e := range snaps {
		commit := e.Name()
		rel := folder + "/snapshots/" + commit
		if commit == h.Commit || !e.IsDir() {
			keep[commit] = true
			continue
		}
		f := File{Name: rel, Path: filepath.Join(g.opt.HFCache, rel)}
		fi, err := root.Lstat(rel)
		if err != nil {
			keep[commit] = true
			continue
		}
		f, _ = g.keepOrListRevision(f, h, commit, fi.ModTime(), held)
		if f.Action == Listed && g.opt.Collect {
			f = g.removeRevision(root, f)
		}
		if f.Action == Removed {
			gone = append(gone, commit)
		} else {
			keep[commit] = true
		}
		out = append(out, f)
	}
	if len(gone) == 0 {
		return out
	}
	return append(out, g.hubLeftovers(root, folder, h, keep, gone)...)
}

// plantedFolder names the first of a repository's folders (itself, its
// snapshots/, blobs/ and refs/) that is a symbolic link or not a
// directory, or "". In a cache users can write, one of them may be a link
// planted to another repository's: judged or removed through it, that
// repository's snapshots and blobs would go. The root keeps gc and
// eviction inside the cache; this keeps them inside the repository. Both
// look before they judge, and eviction again before it removes.
func plantedFolder(root *os.Root, folder string) string {
	for _, d := range []string{folder, folder + "/snapshots", folder + "/blobs", folder + "/refs"} {
		if fi, err := root.Lstat(d); err == nil && (fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir()) {
			return d
		}
	}
	return ""
}

// keepOrListRevision is keepOrList for the old snapshot f of h's
// repository at commit, last written at written.
func (g *run) keepOrListRevision(f File, h catalog.Hub, commit string, written time.Time, held string) (File, fs.FileInfo) {
	// A record names the snapshot, or a file in it (a GGUF's first
	// part), by path, and the revision by its source.
	src := catalog.HubSource(h.Repo, commit)
	for _, r := range g.recs {
		p := filepath.Clean(r.Path)
		if r.Source == src || p == f.Path || strings.HasPrefix(p, f.Path+"/") {
			f.Action, f.Reason = Kept, "an old revision of "+h.Repo+", in use by job "+r.Job+" on this node"
			return f, nil
		}
	}
	if g.opt.Recent > 0 && time.Since(written) < g.opt.Recent {
		f.Action, f.Reason = Kept, fmt.Sprintf("written within the last %s (the gc interval): a job may have fetched it against a newer catalog than this node's copy", g.opt.Recent)
		return f, nil
	}
	if held != "" {
		f.Action, f.Reason = Kept, held
		return f, nil
	}
	f.Action, f.Reason = Listed, fmt.Sprintf("an old revision of %s, which the catalog has at %s and no job on this node uses; gc --collect would remove it", h.Repo, h.Commit)
	return f, nil
}

// removeRevision removes the snapshot directory f: links only, so it
// frees nothing by itself; the blobs it alone linked go after it.
func (g *run) removeRevision(root *os.Root, f File) File {
	if !g.opt.Deadline.IsZero() && !time.Now().Before(g.opt.Deadline) {
		f.Action, f.Reason = Kept, "gc ran out of its time bound before this revision; the next gc looks again"
		return f
	}
	if err := root.RemoveAll(f.Name); err != nil {
		f.Action, f.Reason = Failed, err.Error()
		return f
	}
	f.Action, f.Reason = Removed, "an old revision no job on this node uses"
	return f
}

// hubLeftovers removes what the removed revisions gone alone held: the
// blobs no kept snapshot links to and h's list does not name, and the refs
// that named one of gone.
func (g *run) hubLeftovers(root *os.Root, folder string, h catalog.Hub, keep map[string]bool, gone []string) []File {
	linked := map[string]bool{}
	for _, f := range h.Files {
		linked[f.BlobName()] = true
	}
	for commit := range keep {
		dir := folder + "/snapshots/" + commit
		fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 {
				if t, err := root.Readlink(p); err == nil {
					linked[path.Base(t)] = true
				}
			}
			return nil
		})
	}
	var out []File
	blobs, _ := fs.ReadDir(root.FS(), folder+"/blobs")
	for _, e := range blobs {
		name := e.Name()
		rel := folder + "/blobs/" + name
		if linked[name] || !blobName(name) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || g.opt.Recent > 0 && time.Since(fi.ModTime()) < g.opt.Recent {
			continue
		}
		f := File{Name: rel, Path: filepath.Join(g.opt.HFCache, rel), Size: fi.Size()}
		if !g.opt.Deadline.IsZero() && !time.Now().Before(g.opt.Deadline) {
			f.Action, f.Reason = Kept, "gc ran out of its time bound before this blob; the next gc looks again"
		} else if err := root.Remove(rel); err != nil {
			f.Action, f.Reason = Failed, err.Error()
		} else {
			f.Action, f.Reason = Removed, "a blob of a removed revision that no snapshot links to"
		}
		out = append(out, f)
	}
	goneSet := map[string]bool{}
	for _, c := range gone {
		goneSet[c] = true
	}
	fs.WalkDir(root.FS(), folder+"/refs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := root.ReadFile(p); err == nil && goneSet[strings.TrimSpace(string(b))] {
			root.Remove(p)
		}
		return nil
	})
	return out
}

// blobName reports whether name is a blob's as the Hub names it: a git
// blob id or a sha256, and no download still being written.
func blobName(name string) bool {
	if len(name) != 40 && len(name) != 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !(name[i] >= '0' && name[i] <= '9' || name[i] >= 'a' && name[i] <= 'f') {
			return false
		}
	}
	return true
}

// sameFS reports whether a and b are on one filesystem.
func sameFS(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}
