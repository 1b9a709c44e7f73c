package scan

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// maxDepth bounds how deep a scan descends into one candidate. Real
// model directories are a few levels deep; the bound is what keeps a chain
// of symlinks on a filesystem without inode numbers from running forever.
const maxDepth = 64

// afterList, when set, is called after each directory is listed. Tests
// use it to change the tree part way through a scan.
var afterList func(dir string)

// walker is one scan of one configured directory.
type walker struct {
	ctx     context.Context
	opt     Options
	root    string
	rootID  devIno
	hasRoot bool
	shared  bool

	// sem holds one token per goroutine reading a directory; when none is
	// free the caller reads inline, so concurrency stays bounded without a
	// queue that could deadlock on a deep tree.
	sem chan struct{}
	wg  sync.WaitGroup

	// inside are the directories a symlink may lead into: this scan's
	// directories as configured, and this one's own resolved path.
	inside []string
	// now is when the scan started, for Options.Settle.
	now time.Time

	mu    sync.Mutex
	cands []*candidate
	// busy counts, by candidate path (or Hugging Face repo path before it
	// has candidates), the reads of it not yet returned. A scan that runs
	// out of time reports what has none left and names what still has.
	busy map[string]int
	// cut holds the paths a read skipped because time was up.
	cut map[string]bool
	// at is the top-level entry being classified, and topDone says every
	// one has been: a stat stuck in top holds up the entries after it.
	at        string
	topDone   bool
	splits    map[splitKey]*splitSet
	skipped   []Skip
	skipCount int
}

// candidate is one candidate: a top-level file or directory of a configured
// directory, or one snapshot of a Hugging Face cache entry.
type candidate struct {
	path     string
	modelID  string
	revision string
	file     bool // a single weight file
	id       devIno
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
	// manifest says the candidate holds a set manifest at its top
	// (catalog.SetManifest): llmgw is fetching, or has fetched, a model of
	// several files into it, and it is whole only with every file listed.
	manifest bool
	trouble  trouble
	// problems are the walk's findings about single files by relative
	// path (a broken link, a short header), for a check against a list
	// (hubList) that judges only the files it names.
	problems map[string]string
	visited  map[devIno]bool
}

type splitKey struct {
	prefix string
	total  int
}

// splitSet is a split GGUF at the top of a configured directory,
// gathered from its parts.
type splitSet struct {
	names map[int]string
	sizes map[int]int64
	// problems are the parts whose header says they are cut short.
	problems map[int]string
	id       devIno
	hasID    bool
}

// skip records an entry passed over. Only the MaxSkipped first by path are
// kept (a bounded heap, largest on top), so the list is the same on every
// scan of the same tree, whatever order the workers reached the entries in.
func (s *walker) skip(p, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipCount++
	if s.opt.MaxSkipped <= 0 {
		return
	}
	h := (*skipHeap)(&s.skipped)
	if len(s.skipped) < s.opt.MaxSkipped {
		heap.Push(h, Skip{Path: p, Reason: reason})
	} else if p < s.skipped[0].Path {
		s.skipped[0] = Skip{Path: p, Reason: reason}
		heap.Fix(h, 0)
	}
}

// skipHeap is a max-heap of skips by path.
type skipHeap []Skip

func (h skipHeap) Len() int           { return len(h) }
func (h skipHeap) Less(i, j int) bool { return h[i].Path > h[j].Path }
func (h skipHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *skipHeap) Push(x any)        { *h = append(*h, x.(Skip)) }
func (h *skipHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// within resolves the symlink at abs and reports whether its target lies
// in one of s.inside. A link out of them is not followed: `ln -s / rootfs`
// in a weights directory would otherwise walk the machine (and /proc) as
// one model. A link that cannot be resolved (dangling, a loop) is left to the
// stat that follows it, which says what is wrong.
func (s *walker) within(abs string) (target string, ok bool) {
	t, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", true
	}
	for _, r := range s.inside {
		if t == r || strings.HasPrefix(t, r+"/") || r == "/" {
			return t, true
		}
	}
	return t, false
}

// outsideMsg says why a link was not followed.
func outsideMsg(target string) string {
	return "a symlink to " + quoteName(target) + ", outside the weight directories: not followed"
}

// work runs fn as a read of key (see walker.busy), on a worker if one is
// free. The count is taken here, before fn is queued, so that key is never
// seen idle between being found and being read.
func (s *walker) work(key string, fn func()) {
	s.mu.Lock()
	s.busy[key]++
	s.mu.Unlock()
	s.run(key, fn)
}

// run runs fn as a read of key, counted in s.busy by the caller.
func (s *walker) run(key string, fn func()) {
	s.spawn(func() {
		defer func() {
			s.mu.Lock()
			s.busy[key]--
			s.mu.Unlock()
		}()
		if s.ctx.Err() != nil {
			s.mu.Lock()
			s.cut[key] = true
			s.mu.Unlock()
			return
		}
		fn()
	})
}

// spawn runs fn on a worker goroutine if one is free, else on this one.
func (s *walker) spawn(fn func()) {
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

// readRoot scans one configured directory; dirBounded bounds it in time.
func readRoot(ctx context.Context, dir string, opt Options) result {
	d := Dir{Path: dir}
	// statfs first, and here: on a dead NFS mount it is the call that hangs.
	magic, err := statfsMagic(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			d.Missing = true
		} else {
			d.Err = "statfs: " + errText(err)
		}
		return result{dir: d}
	}
	d.FSType, d.Shared = fsKind(magic)

	h, ents, err := openDir(dir)
	if err != nil {
		switch {
		case len(ents) > 0:
			// A listing that failed part way still names real entries.
			d.Err = "listing stopped part way: " + errText(err)
		case errors.Is(err, fs.ErrNotExist):
			d.Missing = true
		case errors.Is(err, syscall.ENOTDIR):
			d.Err = "not a directory: configure the directory that holds the weights"
		default:
			d.Err = "cannot read: " + errText(err)
		}
		if len(ents) == 0 {
			if h != nil {
				h.close()
			}
			return result{dir: d}
		}
	}
	s := &walker{
		ctx: ctx, opt: opt, root: dir, rootID: h.id, hasRoot: h.hasID, shared: d.Shared,
		sem:    make(chan struct{}, opt.Workers),
		splits: map[splitKey]*splitSet{},
		busy:   map[string]int{}, cut: map[string]bool{},
		inside: append([]string{dir}, opt.roots...),
		now:    time.Now(),
	}
	// Only this directory's own path is resolved here: resolving another
	// configured directory could block on its mount, and this scan must
	// not wait on another's filer.
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		s.inside = append(s.inside, real)
	}
	// The top-level entries are classified on a goroutine of their own, so
	// that a stat stuck on one of them (a link into a hung mount) does not
	// keep this one from reporting the others when time is up.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		i := 0
		for ; i < len(ents) && ctx.Err() == nil; i++ {
			e := &ents[i]
			if e.typ&fs.ModeSymlink != 0 {
				// Resolving a link reads where it leads, which may be
				// the hung mount: on a worker, so the entries after it
				// are still classified.
				s.work(dir+"/"+e.name, func() { s.top(h, e) })
				continue
			}
			s.mu.Lock()
			s.at = dir + "/" + e.name
			s.mu.Unlock()
			s.top(h, e)
		}
		s.mu.Lock()
		s.at, s.topDone = "", i == len(ents)
		s.mu.Unlock()
	}()
	all := make(chan struct{})
	go func() {
		s.wg.Wait()
		h.close()
		close(all)
	}()
	select {
	case <-all:
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		weights := s.finish(s.cands, true)
		sort.Slice(s.skipped, func(i, j int) bool { return s.skipped[i].Path < s.skipped[j].Path })
		d.Skipped, d.SkippedCount = s.skipped, s.skipCount
		return result{dir: d, weights: weights}
	}
	return s.partial(d, all)
}

// partial is the result of a scan that ran out of time: every candidate
// whose reads all returned is reported as usual, and each that did not is
// reported incomplete, as not answering. One entry on a hung filer must
// not hide the models beside it (they are still there and an engine can
// still read them), nor be taken for finished. The walk goes on in the
// background until the stuck reads return; rest is closed then.
func (s *walker) partial(d Dir, rest chan struct{}) result {
	s.mu.Lock()
	var done []*candidate
	stuck := map[string]bool{}
	for _, c := range s.cands {
		if s.busy[c.path] == 0 && !s.cut[c.path] {
			done = append(done, c)
		}
	}
	for p, n := range s.busy {
		if n > 0 || s.cut[p] {
			stuck[p] = true
		}
	}
	if s.at != "" {
		stuck[s.at] = true
	}
	topDone := s.topDone
	s.mu.Unlock()

	why := timeoutMsg(context.DeadlineExceeded, s.opt.DirTimeout)
	if err := s.ctx.Err(); err != context.DeadlineExceeded {
		why = timeoutMsg(err, s.opt.DirTimeout)
	}
	weights := s.finish(done, topDone)
	var paths []string
	for p := range stuck {
		paths = append(paths, p)
		weights = append(weights, Local{Path: p, Shared: s.shared, Problem: why})
	}
	sort.Strings(paths)
	switch {
	case len(paths) == 0 && topDone:
		// Every read returned as time ran out: the result is whole.
	case len(paths) > 0:
		// A few named, the rest counted: each is in Weights with its own
		// Problem, and a filer with a thousand models is one line here.
		var names []string
		for _, p := range paths[:min(len(paths), 3)] {
			names = append(names, quoteName(p))
		}
		d.Err = "partly scanned: " + strings.Join(names, ", ")
		if len(paths) > 3 {
			d.Err += fmt.Sprintf(" and %d more", len(paths)-3)
		}
		d.Err += " " + why
	default:
		d.Err = "partly scanned: " + why
	}
	if !topDone {
		d.Err += "; entries of it not reached by then are not listed"
	}
	s.mu.Lock()
	d.Skipped, d.SkippedCount = slices.Clone(s.skipped), s.skipCount
	s.mu.Unlock()
	sort.Slice(d.Skipped, func(i, j int) bool { return d.Skipped[i].Path < d.Skipped[j].Path })
	return result{dir: d, weights: weights, rest: rest}
}

// top classifies one entry of the configured directory, open as h.
func (s *walker) top(h *dirHandle, e *entry) {
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
	if name == catalog.HubStagingDir {
		s.skip(abs, "files of Hugging Face models being fetched before they move into the Hugging Face cache")
		return
	}
	t := e.typ
	var st fileStat
	var stated bool
	if t&fs.ModeSymlink != 0 {
		// Followed, when it stays within the weight directories: operators
		// link models in from one configured directory to another.
		if tgt, ok := s.within(abs); !ok {
			s.skip(abs, outsideMsg(tgt))
			return
		}
		var err error
		if st, err = h.stat(e, true); err != nil {
			s.skip(abs, linkErr(err))
			return
		}
		t, stated = st.typ, true
	}
	switch {
	case t.IsDir():
		if strings.HasPrefix(name, hfModelPrefix) {
			id, ok := hfModelID(name)
			if !ok {
				s.skip(abs, "not a Hugging Face cache name (models--ORG--NAME)")
				return
			}
			s.work(abs, func() { s.hfRepo(abs, id) })
			return
		}
		if hfOtherCache(name) {
			s.skip(abs, "a Hugging Face dataset or space cache, not a model")
			return
		}
		c := &candidate{path: abs}
		s.add(c, func() { s.candRoot(c) })
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
				s.skip(abs, goneOr(err))
				return
			}
		}
		if prefix, part, total, ok := splitGGUF(name); ok {
			s.addSplit(prefix, part, total, name, st)
			return
		}
		c := &candidate{path: abs}
		c.file, c.id, c.hasID = true, st.id, h.hasID
		c.size, c.nfiles = st.size, 1
		if st.size == 0 {
			c.trouble.add("empty file (a download that never started?)")
		} else if why := s.settling(abs, st); why != "" {
			c.trouble.add(why)
		} else if why := headerProblem(abs, st); why != "" {
			c.trouble.add(why)
		}
		s.add(c, nil)
	default:
		s.skip(abs, "not a regular file or directory")
	}
}

// add registers c, made and filled by the caller first, and starts read
// (when set) as the read of it. Once listed, a candidate with no reads
// outstanding counts as finished, so it is listed and counted busy at once.
func (s *walker) add(c *candidate, read func()) {
	c.weights, c.visited = map[string]int64{}, map[devIno]bool{}
	if s.hasRoot {
		// The configured directory itself: a link back to it is a loop.
		c.visited[s.rootID] = true
	}
	s.mu.Lock()
	s.cands = append(s.cands, c)
	if read != nil {
		s.busy[c.path]++
	}
	s.mu.Unlock()
	if read != nil {
		s.run(c.path, read)
	}
}

func (s *walker) addSplit(prefix string, part, total int, name string, st fileStat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := splitKey{prefix, total}
	set := s.splits[k]
	if set == nil {
		set = &splitSet{names: map[int]string{}, sizes: map[int]int64{}}
		s.splits[k] = set
	}
	set.names[part], set.sizes[part] = name, st.size
	why := s.settling(s.root+"/"+name, st)
	if why == "" {
		why = headerProblem(s.root+"/"+name, st)
	}
	if why != "" {
		if set.problems == nil {
			set.problems = map[int]string{}
		}
		set.problems[part] = why
	}
	if part == 1 || !set.hasID {
		set.id, set.hasID = st.id, s.hasRoot
	}
}

// candRoot reads a top-level directory candidate. A directory holding
// models--* entries is a Hugging Face hub cache (~/.cache/huggingface/hub,
// or a parent of it was configured): its models are reported one by one,
// not as one directory whose size counts every model and old revision.
func (s *walker) candRoot(c *candidate) {
	h, ents, err := openDir(c.path)
	if h == nil {
		c.listFailed("", err)
		return
	}
	defer h.close()
	if err != nil {
		c.listFailed("", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.name, hfModelPrefix) || !(e.typ.IsDir() || e.typ&fs.ModeSymlink != 0) {
			continue
		}
		c.mu.Lock()
		c.notWeights = true
		c.mu.Unlock()
		for _, e := range ents {
			abs := c.path + "/" + e.name
			mid, ok := hfModelID(e.name)
			if !ok {
				s.skip(abs, "in a Hugging Face cache, not a model (models--ORG--NAME)")
				continue
			}
			s.work(abs, func() { s.hfRepo(abs, mid) })
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
func (s *walker) hfRepo(abs, modelID string) {
	snaps := abs + "/snapshots"
	h, ents, err := openDir(snaps)
	if h == nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.skip(abs, "Hugging Face cache entry with no snapshots (a download that never got going?)")
		} else {
			s.skip(abs, "cannot read snapshots: "+errText(err))
		}
		return
	}
	defer h.close()
	// A blob still being written (huggingface_hub names it .incomplete
	// until it is whole) belongs to some snapshot whose links to it are not
	// there yet: none of the repo's snapshots is known to be finished.
	var incomplete []string
	if bh, bents, _ := openDir(abs + "/blobs"); bh != nil {
		for _, e := range bents {
			// huggingface_hub's .incomplete, llmgw's own .part
			if catalog.IsPartialName(e.name) {
				incomplete = append(incomplete, "blobs/"+e.name)
			}
		}
		bh.close()
	}
	n := 0
	for i := range ents {
		e := &ents[i]
		p := snaps + "/" + e.name
		isDir := e.typ.IsDir()
		if e.typ&fs.ModeSymlink != 0 {
			if tgt, ok := s.within(p); !ok {
				s.skip(p, outsideMsg(tgt))
				continue
			}
			st, err := h.stat(e, true)
			isDir = err == nil && st.typ.IsDir()
		}
		if !isDir {
			s.skip(p, "not a snapshot directory")
			continue
		}
		n++
		c := &candidate{path: p, modelID: modelID, revision: e.name}
		c.partials = append(c.partials, incomplete...)
		s.add(c, func() { s.walkDir(c, p, "", 0) })
	}
	if n == 0 {
		s.skip(abs, "Hugging Face cache entry with no snapshots (a download that never got going?)")
	}
}

// enter marks the directory open as h visited for c; false means it was
// seen before (a symlink loop, or a second link to the same place) and is
// not read again.
func (c *candidate) enter(h *dirHandle) bool {
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

func (c *candidate) listFailed(rel string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case rel == "" && errors.Is(err, fs.ErrNotExist):
		c.gone = true
	case rel == "":
		c.trouble.add("cannot read it: " + errText(err))
	default:
		c.trouble.file(rel+"/", goneOr(err))
	}
}

// walkDir reads one directory inside candidate c.
func (s *walker) walkDir(c *candidate, abs, rel string, depth int) {
	h, ents, err := openDir(abs)
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

type subdir struct{ abs, rel string }

// walkEntries measures the entries of one directory of c, open as h, and
// descends into its subdirectories. Symlinks are followed, to files and to
// directories: a Hugging Face snapshot is made of them, and operators link
// shards in from other disks. The sizes counted are those of what the links
// point to, since that is what an engine will read.
func (s *walker) walkEntries(c *candidate, h *dirHandle, abs, rel string, depth int, ents []entry) {
	var (
		size     int64
		n        int
		weights  []namedSize
		indexes  []string
		partials []string
		subs     []subdir
		troubles [][2]string
		broken   int
		manifest bool
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
			subs = append(subs, subdir{abs + "/" + name, relOf(name)})
			continue
		}
		if !follow && !t.IsRegular() {
			continue // FIFOs, sockets, devices: not part of any model, and never opened
		}
		if follow {
			if tgt, ok := s.within(abs + "/" + name); !ok {
				if catalog.IsWeightName(name) {
					troubles = append(troubles, [2]string{relOf(name), outsideMsg(tgt)})
				} else {
					s.skip(abs+"/"+name, outsideMsg(tgt))
				}
				continue
			}
		}
		st, err := h.stat(e, follow)
		if err != nil {
			if follow {
				troubles = append(troubles, [2]string{relOf(name), linkErr(err)})
				if catalog.IsWeightName(name) {
					broken++
				}
			} else {
				troubles = append(troubles, [2]string{relOf(name), goneOr(err)})
			}
			continue
		}
		if st.typ.IsDir() {
			subs = append(subs, subdir{abs + "/" + name, relOf(name)})
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
		case isIndexName(name):
			indexes = append(indexes, relOf(name))
		case rel == "" && name == catalog.SetManifest:
			manifest = true
		case catalog.IsWeightName(name):
			weights = append(weights, namedSize{relOf(name), st.size})
			// A Hugging Face snapshot's link leads to a blob that
			// huggingface_hub and llmgw alike write under another name
			// and rename into place whole: no writer is still at it.
			if follow && c.modelID != "" {
				if why := headerProblem(abs+"/"+name, st); why != "" {
					troubles = append(troubles, [2]string{relOf(name), why})
				}
			} else if why := s.settling(abs+"/"+name, st); why != "" {
				troubles = append(troubles, [2]string{relOf(name), why})
			} else if why := headerProblem(abs+"/"+name, st); why != "" {
				troubles = append(troubles, [2]string{relOf(name), why})
			}
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
	c.manifest = c.manifest || manifest
	for _, t := range troubles {
		c.trouble.file(t[0], t[1])
		if c.problems == nil {
			c.problems = map[string]string{}
		}
		c.problems[t[0]] = t[1]
	}
	if depth+1 > maxDepth && len(subs) > 0 {
		c.trouble.add(fmt.Sprintf("more than %d directories deep: not read past %s", maxDepth, quoteName(rel)))
		subs = nil
	}
	c.mu.Unlock()
	for _, sub := range subs {
		s.work(c.path, func() { s.walkDir(c, sub.abs, sub.rel, depth+1) })
	}
}

type namedSize struct {
	name string
	size int64
}

// finish turns cands into weights, once every walk of them has returned;
// splits says whether every top-level entry was seen, so that the split
// GGUFs are whole as far as the directory goes.
func (s *walker) finish(cands []*candidate, splits bool) []Local {
	var out []Local
	devShared := map[uint64]bool{}
	sharedOf := func(p string, id devIno, hasID bool) bool {
		// A candidate on another filesystem than its configured directory
		// (a mount point inside it, or a link to a filer) is judged by its
		// own filesystem.
		if !hasID || !s.hasRoot || id.dev == s.rootID.dev {
			return s.shared
		}
		if v, ok := devShared[id.dev]; ok {
			return v
		}
		magic, err := statfsMagic(p)
		_, v := fsKind(magic)
		v = v && err == nil
		devShared[id.dev] = v
		return v
	}
	for _, c := range cands {
		if c.notWeights {
			continue
		}
		if c.gone {
			s.skip(c.path, "removed while the scan ran")
			continue
		}
		if !c.file {
			list, listed := s.opt.Hub[HubKey(c.modelID, c.revision)]
			listed = listed && c.modelID != ""
			if !listed && len(c.weights) == 0 && len(c.partials) == 0 && c.broken == 0 {
				s.skip(c.path, c.emptyReason())
				continue
			}
			if listed {
				c.hubList(list)
			} else {
				c.checkComplete()
			}
		}
		out = append(out, Local{
			Path: c.path, Size: c.size, Shared: sharedOf(c.path, c.id, c.hasID),
			Complete: c.trouble.empty(), Problem: c.trouble.String(),
			ModelID: c.modelID, Revision: c.revision,
		})
	}
	if !splits {
		return out
	}
	for k, set := range s.splits {
		first, ok := set.names[1]
		if !ok {
			first = splitName(k.prefix, 1, k.total)
		}
		var t trouble
		var size int64
		for part := 1; part <= k.total; part++ {
			name, ok := set.names[part]
			switch {
			case !ok:
				t.file(splitName(k.prefix, part, k.total), "missing")
			case set.sizes[part] == 0:
				t.file(name, "empty")
			case set.problems[part] != "":
				t.file(name, set.problems[part])
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

func (c *candidate) emptyReason() string {
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

// errText is an error's cause without the path os already put in it
// (the path is beside it in the report).
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err.Error()
}

func goneOr(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "removed while the scan ran"
	}
	return "unreadable: " + errText(err)
}

// linkErr says why a symlink could not be followed.
func linkErr(err error) string {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return "symlink loop"
	case errors.Is(err, fs.ErrNotExist):
		return "dangling symlink (its target is gone)"
	}
	return "symlink not followed: " + errText(err)
}
