package gc

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// What Hub fetches leave in the llmgw cache's staging directory
// (.hub-staging/models--ORG--NAME/, weights/fetch/hub.go), judged the same
// way by gc and by eviction. A blob moves out of staging once verified,
// so what stays is a fetch under way, one that stopped (<digest>.part and
// its .part.ranges), or a blob that could not be moved in; the next fetch
// of it resumes or moves it. The rules are a fetch's .part's in the cache:
//
//   - live: touched within partQuiet (or the run's Recent): a fetch is
//     writing it. Eviction counts it as a fetch writing its repository,
//     whose snapshots it then keeps;
//   - kept for a resume: its blob listed by a catalog Hub model, and
//     untouched for less than PartMaxAge;
//   - garbage: the rest. gc removes it (the Epilog's, or --collect), and
//     eviction takes it, under pressure, as unwanted: first, before any
//     file the catalog wants. Before, eviction counted any file there as
//     a live fetch and never removed one, so a node full of what a
//     stopped fetch left evicted wanted models instead.
//
// Only names that are a blob's, or a fetch of one, in a repository's
// folder, and only regular files: never a link, never anything else.

// stagedState is what a file in staging is to gc and eviction.
type stagedState int

const (
	stagedLive    stagedState = iota // a fetch is writing it
	stagedResume                     // a fetch to resume, of a listed blob
	stagedGarbage                    // what a stopped fetch left
)

// stagedFile is one file of a Hub fetch in the staging directory.
type stagedFile struct {
	rel   string // its name in the cache: .hub-staging/FOLDER/NAME
	info  fs.FileInfo
	state stagedState
	why   string // for garbage: why it is
}

// stagedWanted maps each blob the catalog's Hub models list to a model
// that lists it.
func stagedWanted(models []catalog.Model) map[string]string {
	wanted := map[string]string{}
	for _, m := range models {
		if m.IsHub() {
			for _, f := range m.Hub.Files {
				wanted[f.BlobName()] = m.Name
			}
		}
	}
	return wanted
}

// judgeStaged says what the staged file fi, of blob, is (see above).
func judgeStaged(opt Options, wanted map[string]string, blob string, fi fs.FileInfo) (stagedState, string) {
	age := time.Since(fi.ModTime())
	if age < partQuiet || age < opt.Recent {
		return stagedLive, ""
	}
	m, want := wanted[blob]
	if !want {
		return stagedGarbage, "left in staging by a Hub fetch that stopped, of a blob no catalog model lists"
	}
	if opt.PartMaxAge <= 0 || age < opt.PartMaxAge {
		return stagedResume, ""
	}
	return stagedGarbage, fmt.Sprintf("left in staging by a Hub fetch that stopped, untouched for %s, longer than gc_part_max_age (%s), though model %s lists its blob", age.Round(time.Hour), opt.PartMaxAge, m)
}

// stagedIn lists and judges the files of Hub fetches for the repository
// folder in the staging directory of the cache root.
func stagedIn(root *os.Root, opt Options, wanted map[string]string, folder string) []stagedFile {
	dir := catalog.HubStagingDir + "/" + folder
	ents, err := fs.ReadDir(root.FS(), dir)
	if err != nil {
		return nil
	}
	var out []stagedFile
	for _, e := range ents {
		blob, ok := stagedBlob(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		rel := dir + "/" + e.Name()
		fi, err := root.Lstat(rel)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		state, why := judgeStaged(opt, wanted, blob, fi)
		out = append(out, stagedFile{rel: rel, info: fi, state: state, why: why})
	}
	return out
}

// stagedFolders are the repository folders in the staging directory.
func stagedFolders(root *os.Root) []string {
	ents, err := fs.ReadDir(root.FS(), catalog.HubStagingDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && catalog.HubRepoOf(e.Name()) != "" {
			out = append(out, e.Name())
		}
	}
	return out
}

// stagedEntries are the staging directory's garbage as eviction entries
// (unwanted): what gc would remove, eviction may take first.
func stagedEntries(root *os.Root, opt Options) []Entry {
	wanted := stagedWanted(opt.Catalog.Models)
	var out []Entry
	for _, folder := range stagedFolders(root) {
		for _, s := range stagedIn(root, opt, wanted, folder) {
			if s.state == stagedGarbage {
				out = append(out, Entry{Name: s.rel, Path: filepath.Join(opt.CacheDir, s.rel), Size: blocks(s.info), Written: s.info.ModTime()})
			}
		}
	}
	return out
}

// IsStagedEntry says whether name is an eviction entry of the staging
// directory: .hub-staging/FOLDER/NAME, a blob's or a fetch of one.
func IsStagedEntry(name string) bool {
	parts := strings.Split(name, "/")
	if len(parts) != 3 || parts[0] != catalog.HubStagingDir || catalog.HubRepoOf(parts[1]) == "" {
		return false
	}
	_, ok := stagedBlob(parts[2])
	return ok
}

// hubStaging judges, and with Collect removes, what Hub fetches left in
// the staging directory (see above); held, when set, keeps everything.
func (g *run) hubStaging(held string) []File {
	folders := stagedFolders(g.root)
	if len(folders) == 0 {
		return nil
	}
	if held == "" && len(g.opt.Catalog.Models) == 0 {
		held = "the catalog copy reads as empty; that is more likely a fault than a wish to remove every model, so nothing is removed"
	}
	wanted := stagedWanted(g.opt.Catalog.Models)
	var out []File
	for _, folder := range folders {
		for _, s := range stagedIn(g.root, g.opt, wanted, folder) {
			if s.state != stagedGarbage {
				continue // a fetch under way, or one to resume: not news
			}
			f := File{Name: s.rel, Path: filepath.Join(g.opt.CacheDir, s.rel), Size: s.info.Size()}
			switch {
			case held != "":
				f.Action, f.Reason = Kept, held
			case !g.opt.Collect:
				f.Action, f.Reason = Listed, s.why+"; gc --collect would remove it"
			case !g.opt.Deadline.IsZero() && !time.Now().Before(g.opt.Deadline):
				f.Action, f.Reason = Kept, "gc ran out of its time bound before this file; the next gc looks again"
			default:
				f = g.removeStaged(f, s.info, s.why)
			}
			out = append(out, f)
		}
		g.root.Remove(catalog.HubStagingDir + "/" + folder) // once empty; a fetch making it again is fine
	}
	return out
}

// evictStaged removes the staging directory's files named, each for its
// reason, after judging each again by gc's rules: only garbage goes.
func evictStaged(opt Options, names []string, reasons map[string]string) []File {
	var out []File
	root, err := os.OpenRoot(opt.CacheDir)
	if err != nil {
		for _, n := range names {
			out = append(out, File{Name: n, Path: filepath.Join(opt.CacheDir, n), Action: Failed, Reason: err.Error()})
		}
		return out
	}
	defer root.Close()
	g := &run{opt: opt, root: root}
	wanted := stagedWanted(opt.Catalog.Models)
	for _, name := range names {
		f := File{Name: name, Path: filepath.Join(opt.CacheDir, name)}
		parts := strings.Split(name, "/")
		var s *stagedFile
		if IsStagedEntry(name) {
			for _, c := range stagedIn(root, opt, wanted, parts[1]) {
				if c.rel == name {
					s = &c
					break
				}
			}
		}
		switch {
		case !IsStagedEntry(name):
			f.Action, f.Reason = Refused, "not a file of a Hub fetch in the staging directory"
		case s == nil:
			f.Action, f.Reason = Kept, "no such staged file any more (or not a regular file)"
		case s.state == stagedLive:
			f.Action, f.Reason = Kept, "a Hub fetch is writing it"
		case s.state == stagedResume:
			f.Action, f.Reason = Kept, "a stopped Hub fetch of a blob a catalog model lists, to resume"
		case !opt.Deadline.IsZero() && !time.Now().Before(opt.Deadline):
			f.Action, f.Reason = Kept, "eviction ran out of its time bound before this file"
		default:
			f.Size = s.info.Size()
			f = g.removeStaged(f, s.info, "evicted: "+reasons[name])
			if f.Action == Removed {
				f.Size = blocks(s.info)
			}
		}
		out = append(out, f)
	}
	return out
}

// removeStaged unlinks the staged file f, judged as judged, after looking
// at it once more: still that regular file, and not written since.
func (g *run) removeStaged(f File, judged fs.FileInfo, why string) File {
	fi, err := g.root.Lstat(f.Name)
	switch {
	case err != nil:
		f.Action, f.Reason = Refused, "it went away before it could be removed"
	case !fi.Mode().IsRegular() || !os.SameFile(fi, judged) || !fi.ModTime().Equal(judged.ModTime()):
		f.Action, f.Reason = Refused, "it changed after it was judged; the next gc judges it again"
	default:
		if err := g.root.Remove(f.Name); err != nil {
			f.Action, f.Reason = Failed, fmt.Sprintf("remove: %v", err)
		} else {
			f.Action, f.Reason = Removed, why
		}
	}
	return f
}

// stagedBlob is the blob a file in staging is of: the blob itself, or a
// fetch of it (.part, .part.ranges, .part.ranges.tmp).
func stagedBlob(name string) (string, bool) {
	for _, suffix := range []string{catalog.RangesTmpSuffix, catalog.RangesSuffix, catalog.PartSuffix, ""} {
		if base, ok := strings.CutSuffix(name, suffix); ok && blobName(base) {
			return base, true
		}
	}
	return "", false
}
