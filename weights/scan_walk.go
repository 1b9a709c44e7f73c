package weights

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/llmgw/llmgw/weights/catalog"
)

// scanMaxDepth bounds how deep a scan descends into one candidate. Real
// model directories are a few levels deep; the bound is what keeps a chain
// of symlinks on a filesystem without inode numbers from running forever.
const scanMaxDepth = 64

// scanAfterList, when set, is called after each directory is listed. Tests
// use it to change the tree part way through a scan.
var scanAfterList func(dir string)

// scanState is one scan of one configured directory.
type scanState struct {
	ctx     context.Context
	opt     ScanOptions
	root    string
	rootID  scanDevIno
	hasRoot bool
	shared  bool

	// sem holds one token per goroutine reading a directory; when none is
	// free the caller reads inline, so concurrency stays bounded without a
	// queue that could deadlock on a deep tree.
	sem chan struct{}
	wg  sync.WaitGroup

	mu        sync.Mutex
	cands     []*scanCand
	splits    map[scanSplitKey]*scanSplitSet
	skipped   []Skip
	skipCount int
}

// scanCand is one candidate: a top-level file or directory of a configured
// directory, or one snapshot of a Hugging Face cache entry.
type scanCand struct {
	path     string
	modelID  string
	revision string
	file     bool // a single weight file
	id       scanDevIno
	hasID    bool

	mu         sync.Mutex
	notWeights bool // turned out to be something else (a hub cache root)
	gone       bool // removed while the scan ran
	size       int64
	nfiles     int
	weights    map[string]int64 // rel path → size of each weight file
	broken     int              // weight-named links whose target is gone
	indexes    []string         // rel paths of sharded-checkpoint indexes
	partials   []string         // rel paths of downloads still being written
	trouble    scanTrouble
	visited    map[scanDevIno]bool
}

type scanSplitKey struct {
	prefix string
	total  int
}

// scanSplitSet is a split GGUF at the top of a configured directory,
// gathered from its parts.
type scanSplitSet struct {
	names map[int]string
	sizes map[int]int64
	id    scanDevIno
	hasID bool
}

// skip records an entry passed over. Only the MaxSkipped first by path are
// kept (a bounded heap, largest on top), so the list is the same on every
// scan of the same tree, whatever order the workers reached the entries in.
func (s *scanState) skip(p, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipCount++
	if s.opt.MaxSkipped <= 0 {
		return
	}
	h := (*scanSkipHeap)(&s.skipped)
	if len(s.skipped) < s.opt.MaxSkipped {
		heap.Push(h, Skip{Path: p, Reason: reason})
	} else if p < s.skipped[0].Path {
		s.skipped[0] = Skip{Path: p, Reason: reason}
		heap.Fix(h, 0)
	}
}

// scanSkipHeap is a max-heap of skips by path.
type scanSkipHeap []Skip

func (h scanSkipHeap) Len() int           { return len(h) }
func (h scanSkipHeap) Less(i, j int) bool { return h[i].Path > h[j].Path }
func (h scanSkipHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *scanSkipHeap) Push(x any)        { *h = append(*h, x.(Skip)) }
func (h *scanSkipHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// spawn runs fn on a worker goroutine if one is free, else on this one.
func (s *scanState) spawn(fn func()) {
	select {
	case s.sem <- struct{}{}:
		s.wg.Add(1)
		go func() {
			defer func() { <-s.sem; s.wg.Done() }()
			fn()
		}()
	default:
		fn()
	}
}

// scanDir scans one configured directory; scanBounded bounds it in time.
func scanDir(ctx context.Context, dir string, opt ScanOptions) scanResult {
	d := Dir{Path: dir}
	// statfs first, and here: on a dead NFS mount it is the call that hangs.
	magic, err := scanStatfs(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			d.Missing = true
		} else {
			d.Err = "statfs: " + scanErrText(err)
		}
		return scanResult{dir: d}
	}
	d.FSType, d.Shared = scanFSKind(magic)

	h, ents, err := scanOpenDir(dir)
	if err != nil {
		switch {
		case len(ents) > 0:
			// A listing that failed part way still names real entries.
			d.Err = "listing stopped part way: " + scanErrText(err)
		case errors.Is(err, fs.ErrNotExist):
			d.Missing = true
		case errors.Is(err, syscall.ENOTDIR):
			d.Err = "not a directory: configure the directory that holds the weights"
		default:
			d.Err = "cannot read: " + scanErrText(err)
		}
		if len(ents) == 0 {
			if h != nil {
				h.close()
			}
			return scanResult{dir: d}
		}
	}
	s := &scanState{
		ctx: ctx, opt: opt, root: dir, rootID: h.id, hasRoot: h.hasID, shared: d.Shared,
		sem:    make(chan struct{}, opt.Workers),
		splits: map[scanSplitKey]*scanSplitSet{},
	}
	for i := range ents {
		if ctx.Err() != nil {
			break
		}
		s.top(h, &ents[i])
	}
	h.close()
	s.wg.Wait()
	weights := s.finish()
	sort.Slice(s.skipped, func(i, j int) bool { return s.skipped[i].Path < s.skipped[j].Path })
	d.Skipped, d.SkippedCount = s.skipped, s.skipCount
	return scanResult{dir: d, weights: weights}
}

// top classifies one entry of the configured directory, open as h.
func (s *scanState) top(h *scanDirHandle, e *scanEnt) {
	name := e.name
	abs := s.root + "/" + name
	if catalog.IsPartialName(name) {
		s.skip(abs, "a download still being written (not yet renamed to its final name)")
		return
	}
	if name == ".locks" {
		s.skip(abs, "Hugging Face cache lock files, not a model")
		return
	}
	t := e.typ
	var st scanStat
	var stated bool
	if t&fs.ModeSymlink != 0 {
		// Followed: operators link models in from elsewhere.
		var err error
		if st, err = h.stat(e, true); err != nil {
			s.skip(abs, scanLinkErr(err))
			return
		}
		t, stated = st.typ, true
	}
	switch {
	case t.IsDir():
		if strings.HasPrefix(name, scanHFModelPrefix) {
			id, ok := scanHFModelID(name)
			if !ok {
				s.skip(abs, "not a Hugging Face cache name (models--ORG--NAME)")
				return
			}
			s.spawn(func() { s.hfRepo(abs, id) })
			return
		}
		if scanHFOtherCache(name) {
			s.skip(abs, "a Hugging Face dataset or space cache, not a model")
			return
		}
		c := s.newCand(abs)
		s.spawn(func() { s.candRoot(c) })
	case t.IsRegular():
		if !catalog.IsWeightName(name) {
			// Decided by name, before any stat: a directory of 100,000
			// notes costs one listing.
			s.skip(abs, "not weights (not a .gguf, .safetensors, .bin, .pt or .pth file)")
			return
		}
		if !stated {
			var err error
			if st, err = h.stat(e, false); err != nil {
				s.skip(abs, scanGoneOr(err))
				return
			}
		}
		if prefix, part, total, ok := scanSplitGGUF(name); ok {
			s.addSplit(prefix, part, total, name, st)
			return
		}
		c := s.newCand(abs)
		c.file, c.id, c.hasID = true, st.id, h.hasID
		c.size, c.nfiles = st.size, 1
		if st.size == 0 {
			c.trouble.add("empty file (a download that never started?)")
		}
	default:
		s.skip(abs, "not a regular file or directory")
	}
}

func (s *scanState) newCand(p string) *scanCand {
	c := &scanCand{path: p, weights: map[string]int64{}, visited: map[scanDevIno]bool{}}
	if s.hasRoot {
		// The configured directory itself: a link back to it is a loop.
		c.visited[s.rootID] = true
	}
	s.mu.Lock()
	s.cands = append(s.cands, c)
	s.mu.Unlock()
	return c
}

func (s *scanState) addSplit(prefix string, part, total int, name string, st scanStat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := scanSplitKey{prefix, total}
	set := s.splits[k]
	if set == nil {
		set = &scanSplitSet{names: map[int]string{}, sizes: map[int]int64{}}
		s.splits[k] = set
	}
	set.names[part], set.sizes[part] = name, st.size
	if part == 1 || !set.hasID {
		set.id, set.hasID = st.id, s.hasRoot
	}
}

// candRoot reads a top-level directory candidate. A directory holding
// models--* entries is a Hugging Face hub cache (~/.cache/huggingface/hub,
// or a parent of it was configured): its models are reported one by one,
// not as one directory whose size counts every model and old revision.
func (s *scanState) candRoot(c *scanCand) {
	if s.ctx.Err() != nil {
		return
	}
	h, ents, err := scanOpenDir(c.path)
	if h == nil {
		c.listFailed("", err)
		return
	}
	defer h.close()
	if err != nil {
		c.listFailed("", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.name, scanHFModelPrefix) || !(e.typ.IsDir() || e.typ&fs.ModeSymlink != 0) {
			continue
		}
		c.mu.Lock()
		c.notWeights = true
		c.mu.Unlock()
		for _, e := range ents {
			abs := c.path + "/" + e.name
			mid, ok := scanHFModelID(e.name)
			if !ok {
				s.skip(abs, "in a Hugging Face cache, not a model (models--ORG--NAME)")
				continue
			}
			s.spawn(func() { s.hfRepo(abs, mid) })
		}
		return
	}
	if !c.enter(h) {
		c.mu.Lock()
		c.notWeights = true
		c.mu.Unlock()
		s.skip(c.path, "symlink loop: leads back into the directory being scanned")
		return
	}
	s.walkEntries(c, h, c.path, "", 0, ents)
}

// hfRepo reads one models--org--name entry of a hub cache and walks each of
// its snapshots as a candidate of its own.
func (s *scanState) hfRepo(abs, modelID string) {
	snaps := abs + "/snapshots"
	h, ents, err := scanOpenDir(snaps)
	if h == nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.skip(abs, "Hugging Face cache entry with no snapshots (a download that never got going?)")
		} else {
			s.skip(abs, "cannot read snapshots: "+scanErrText(err))
		}
		return
	}
	defer h.close()
	n := 0
	for i := range ents {
		e := &ents[i]
		p := snaps + "/" + e.name
		isDir := e.typ.IsDir()
		if e.typ&fs.ModeSymlink != 0 {
			st, err := h.stat(e, true)
			isDir = err == nil && st.typ.IsDir()
		}
		if !isDir {
			s.skip(p, "not a snapshot directory")
			continue
		}
		n++
		c := s.newCand(p)
		c.modelID, c.revision = modelID, e.name
		s.spawn(func() { s.walkDir(c, p, "", 0) })
	}
	if n == 0 {
		s.skip(abs, "Hugging Face cache entry with no snapshots (a download that never got going?)")
	}
}

// enter marks the directory open as h visited for c; false means it was
// seen before (a symlink loop, or a second link to the same place) and is
// not read again.
func (c *scanCand) enter(h *scanDirHandle) bool {
	if !h.hasID {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.visited[h.id]
	c.visited[h.id] = true
	if !c.hasID {
		// The candidate's own root: its device decides Shared.
		c.id, c.hasID = h.id, true
	}
	return !seen
}

func (c *scanCand) listFailed(rel string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case rel == "" && errors.Is(err, fs.ErrNotExist):
		c.gone = true
	case rel == "":
		c.trouble.add("cannot read it: " + scanErrText(err))
	default:
		c.trouble.file(rel+"/", scanGoneOr(err))
	}
}

// walkDir reads one directory inside candidate c.
func (s *scanState) walkDir(c *scanCand, abs, rel string, depth int) {
	if s.ctx.Err() != nil {
		return
	}
	h, ents, err := scanOpenDir(abs)
	if h == nil {
		c.listFailed(rel, err)
		return
	}
	defer h.close()
	if err != nil {
		c.listFailed(rel, err)
	}
	if !c.enter(h) {
		if rel == "" {
			// The candidate is a directory already being scanned.
			c.mu.Lock()
			c.notWeights = true
			c.mu.Unlock()
			s.skip(abs, "symlink loop: leads back into the directory being scanned")
		} else {
			s.skip(abs, "not read twice: reached again through a symlink (a loop?)")
		}
		return
	}
	s.walkEntries(c, h, abs, rel, depth, ents)
}

type scanSub struct{ abs, rel string }

// walkEntries measures the entries of one directory of c, open as h, and
// descends into its subdirectories. Symlinks are followed, to files and to
// directories: a Hugging Face snapshot is made of them, and operators link
// shards in from other disks. The sizes counted are those of what the links
// point to, since that is what an engine will read.
func (s *scanState) walkEntries(c *scanCand, h *scanDirHandle, abs, rel string, depth int, ents []scanEnt) {
	var (
		size     int64
		n        int
		weights  []scanNamedSize
		indexes  []string
		partials []string
		subs     []scanSub
		troubles [][2]string
		broken   int
	)
	relOf := func(name string) string {
		if rel == "" {
			return name
		}
		return rel + "/" + name
	}
	for i := range ents {
		e := &ents[i]
		name := e.name
		t := e.typ
		follow := t&fs.ModeSymlink != 0
		if t.IsDir() {
			subs = append(subs, scanSub{abs + "/" + name, relOf(name)})
			continue
		}
		if !follow && !t.IsRegular() {
			continue // FIFOs, sockets, devices: not part of any model, and never opened
		}
		st, err := h.stat(e, follow)
		if err != nil {
			if follow {
				troubles = append(troubles, [2]string{relOf(name), scanLinkErr(err)})
				if catalog.IsWeightName(name) {
					broken++
				}
			} else {
				troubles = append(troubles, [2]string{relOf(name), scanGoneOr(err)})
			}
			continue
		}
		if st.typ.IsDir() {
			subs = append(subs, scanSub{abs + "/" + name, relOf(name)})
			continue
		}
		if !st.typ.IsRegular() {
			continue
		}
		size += st.size
		n++
		switch {
		case catalog.IsPartialName(name):
			partials = append(partials, relOf(name))
		case scanIsIndexName(name):
			indexes = append(indexes, relOf(name))
		case catalog.IsWeightName(name):
			weights = append(weights, scanNamedSize{relOf(name), st.size})
		}
	}
	c.mu.Lock()
	c.size += size
	c.nfiles += n
	c.broken += broken
	for _, w := range weights {
		c.weights[w.name] = w.size
	}
	c.indexes = append(c.indexes, indexes...)
	c.partials = append(c.partials, partials...)
	for _, t := range troubles {
		c.trouble.file(t[0], t[1])
	}
	if depth+1 > scanMaxDepth && len(subs) > 0 {
		c.trouble.add(fmt.Sprintf("more than %d directories deep: not read past %s", scanMaxDepth, scanQuoteName(rel)))
		subs = nil
	}
	c.mu.Unlock()
	for _, sub := range subs {
		s.spawn(func() { s.walkDir(c, sub.abs, sub.rel, depth+1) })
	}
}

type scanNamedSize struct {
	name string
	size int64
}

// finish turns the candidates into weights, once every walk has returned.
func (s *scanState) finish() []Local {
	var out []Local
	devShared := map[uint64]bool{}
	sharedOf := func(p string, id scanDevIno, hasID bool) bool {
		// A candidate on another filesystem than its configured directory
		// (a mount point inside it, or a link to a filer) is judged by its
		// own filesystem.
		if !hasID || !s.hasRoot || id.dev == s.rootID.dev {
			return s.shared
		}
		if v, ok := devShared[id.dev]; ok {
			return v
		}
		magic, err := scanStatfs(p)
		_, v := scanFSKind(magic)
		v = v && err == nil
		devShared[id.dev] = v
		return v
	}
	for _, c := range s.cands {
		if c.notWeights {
			continue
		}
		if c.gone {
			s.skip(c.path, "removed while the scan ran")
			continue
		}
		if !c.file {
			if len(c.weights) == 0 && len(c.partials) == 0 && c.broken == 0 {
				s.skip(c.path, c.emptyReason())
				continue
			}
			c.checkComplete()
		}
		out = append(out, Local{
			Path: c.path, Size: c.size, Shared: sharedOf(c.path, c.id, c.hasID),
			Complete: c.trouble.empty(), Problem: c.trouble.String(),
			ModelID: c.modelID, Revision: c.revision,
		})
	}
	for k, set := range s.splits {
		first, ok := set.names[1]
		if !ok {
			first = scanSplitName(k.prefix, 1, k.total)
		}
		var t scanTrouble
		var size int64
		for part := 1; part <= k.total; part++ {
			name, ok := set.names[part]
			switch {
			case !ok:
				t.file(scanSplitName(k.prefix, part, k.total), "missing")
			case set.sizes[part] == 0:
				t.file(name, "empty")
			}
			size += set.sizes[part]
		}
		if !t.empty() {
			t.add(fmt.Sprintf("split GGUF of %d parts, %d present", k.total, len(set.names)))
		}
		p := s.root + "/" + first
		out = append(out, Local{Path: p, Size: size, Shared: sharedOf(p, set.id, set.hasID),
			Complete: t.empty(), Problem: t.String()})
	}
	return out
}

func (c *scanCand) emptyReason() string {
	switch {
	case c.modelID != "":
		return "snapshot holds no weight files yet (only configs downloaded?)"
	case c.nfiles == 0 && c.trouble.empty():
		return "empty directory (a download that never finished?)"
	case c.nfiles == 0:
		return c.trouble.String()
	}
	return "no weight files (.gguf, .safetensors, .bin, .pt, .pth) in it"
}

// checkComplete decides whether a directory candidate is finished: no
// download still being written, every shard its indexes list present and
// non-empty, every part of each split GGUF, no empty weight file. Broken
// links and unreadable subdirectories were noted during the walk.
func (c *scanCand) checkComplete() {
	sort.Strings(c.partials)
	if n := len(c.partials); n > 0 {
		msg := "a download is still being written (" + scanQuoteName(c.partials[0])
		if n > 1 {
			msg += fmt.Sprintf(" and %d more", n-1)
		}
		c.trouble.add(msg + ")")
	}
	if len(c.weights) == 0 && c.broken == 0 {
		c.trouble.add("no finished weight file yet")
	}
	sort.Strings(c.indexes)
	listed := map[string]bool{}
	for _, idx := range c.indexes {
		shards, err := scanReadIndex(c.path + "/" + idx)
		if err != nil {
			c.trouble.add(fmt.Sprintf("index %s unusable: %s", scanQuoteName(idx), scanErrText(err)))
			continue
		}
		dir := path.Dir(idx)
		for _, sh := range shards {
			if scanShardOutside(sh) {
				c.trouble.add(fmt.Sprintf("index %s names a file outside the model: %s", scanQuoteName(idx), scanQuoteName(sh)))
				continue
			}
			r := path.Join(dir, sh)
			listed[r] = true
			size, ok := c.weights[r]
			if !ok {
				// A shard not named like a weight file was not recorded.
				st, err := os.Stat(c.path + "/" + r)
				if err != nil || !st.Mode().IsRegular() {
					c.trouble.file(r, "missing, listed in "+path.Base(idx))
					continue
				}
				size = st.Size()
			}
			if size == 0 {
				c.trouble.file(r, "empty")
			}
		}
	}
	names := make([]string, 0, len(c.weights))
	for r := range c.weights {
		names = append(names, r)
	}
	sort.Strings(names)
	type setKey struct {
		dir, prefix string
		total       int
	}
	sets := map[setKey]map[int]bool{}
	for _, r := range names {
		if prefix, part, total, ok := scanSplitGGUF(path.Base(r)); ok {
			k := setKey{path.Dir(r), prefix, total}
			if sets[k] == nil {
				sets[k] = map[int]bool{}
			}
			sets[k][part] = true
		}
		if c.weights[r] == 0 && !listed[r] {
			c.trouble.file(r, "empty")
		}
	}
	for k, parts := range sets {
		for part := 1; part <= k.total; part++ {
			if !parts[part] {
				c.trouble.file(path.Join(k.dir, scanSplitName(k.prefix, part, k.total)), "missing part of a split GGUF")
			}
		}
	}
}

// scanErrText is an error's cause without the path os already put in it
// (the path is beside it in the report).
func scanErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err.Error()
}

func scanGoneOr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "removed while the scan ran"
	}
	return "unreadable: " + scanErrText(err)
}

// scanLinkErr says why a symlink could not be followed.
func scanLinkErr(err error) string {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return "symlink loop"
	case errors.Is(err, fs.ErrNotExist):
		return "dangling symlink (its target is gone)"
	}
	return "symlink not followed: " + scanErrText(err)
}
