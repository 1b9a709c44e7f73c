// Package scan says which weights a node can see: it walks the directories
// an operator configures and reports each weight file, or directory holding
// one, with its size, whether it is on a shared filesystem, and whether it
// is complete.
//
// It observes and changes nothing. Weights on a shared filer, an image
// exported over the fabric, a Hugging Face cache an engine filled, a copy by
// rsync or a fetch by llmgw are all simply present; how they got there is
// nobody's business here, and present means there is nothing to do.
//
// Of llmgw it imports only weights/catalog, whose name rules (what is a
// weight file, what is a download still being written) it shares with the
// fetcher and gc.
package scan

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Defaults for Options.
const (
	// DefaultDirTimeout bounds the scan of one configured directory.
	DefaultDirTimeout = 10 * time.Second
	// DefaultWorkers is how many directories a scan reads at once.
	DefaultWorkers = 8
	// DefaultMaxSkipped is how many skipped entries each Dir lists.
	DefaultMaxSkipped = 100
	// DefaultSettle is how long a weight file must have gone unmodified
	// to count as finished. A copy by rsync, cp or an engine's downloader
	// writes in place; a file it wrote to a second ago may be written to
	// again. Five seconds is well above the gap between two writes of any
	// copy still running, and well below any scan interval.
	DefaultSettle = 5 * time.Second
)

// Options tunes Scan. The zero value is ready to use.
type Options struct {
	// DirTimeout bounds the scan of one configured directory (default
	// DefaultDirTimeout). An entry of it that has not answered by then is
	// reported incomplete, as not answering, and Dir.Err names it; the
	// models of the directory that were read in time are reported as usual.
	// A directory whose own listing does not answer is reported with an
	// error and nothing from it counts as present. The other directories
	// are not held up, because each is scanned on its own.
	DirTimeout time.Duration

	// Workers is how many directories within one configured directory are
	// read at once (default DefaultWorkers; 1 reads strictly in
	// sequence). More hides the latency of a cold disk or a network
	// filesystem, where each directory read is a round trip.
	Workers int

	// MaxSkipped bounds how many skipped entries each Dir lists (default
	// DefaultMaxSkipped; negative lists none). Dir.SkippedCount always has
	// the total: a directory of 100,000 notes must not become a 100,000-line
	// report to the coordinator.
	MaxSkipped int

	// Settle is how long a weight file must have gone unmodified to be
	// complete (default DefaultSettle; negative: no such check). A file
	// under a cache name is exempt: llmgw's fetcher renames a file there
	// only once it is whole.
	Settle time.Duration

	// Memory, when set, carries each weight file's size from one scan to
	// the next (a running agent keeps one): the settle rule then applies
	// only to files seen growing, or not seen before, never to one whose
	// mtime alone changed.
	Memory *Memory
	// Hub are the file lists of the catalog's Hub models (weights/catalog
	// hub.go), by HubKey(repository, commit): a Hugging Face cache snapshot
	// of one of them is complete when every file of the list is in it
	// with its size, whoever downloaded it, and not by the rules a
	// snapshot scanned without a list is held to (see hubList).
	Hub map[string]catalog.Hub

	// roots are every directory of this scan, cleaned and absolute: a
	// symlink is followed only to within one of them (see walker.within).
	roots []string
}

// HubKey is the key of Options.Hub: a repository id, compared without
// regard to case as the Hub does, and a commit.
func HubKey(repo, commit string) string { return strings.ToLower(repo) + "@" + commit }

// HubLists is Options.Hub for the models of a catalog.
func HubLists(models []catalog.Model) map[string]catalog.Hub {
	var out map[string]catalog.Hub
	for _, m := range models {
		if m.IsHub() {
			if out == nil {
				out = map[string]catalog.Hub{}
			}
			out[HubKey(m.Hub.Repo, m.Hub.Commit)] = *m.Hub
		}
	}
	return out
}

func (o Options) withDefaults() Options {
	if o.DirTimeout <= 0 {
		o.DirTimeout = DefaultDirTimeout
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.MaxSkipped == 0 {
		o.MaxSkipped = DefaultMaxSkipped
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	return o
}

// Memory is what a scan remembers for the next one (Options.Memory): the
// size each weight file had, by device and inode. Safe for one scan at a
// time.
type Memory struct {
	mu         sync.Mutex
	last, this map[devIno]int64
}

func (m *Memory) begin() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.this = map[devIno]int64{}
	m.mu.Unlock()
}

// end makes this scan's sizes the ones the next scan compares with.
func (m *Memory) end() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.last, m.this = m.this, nil
	m.mu.Unlock()
}

// sameSize notes st's size for the next scan and says whether the last
// scan saw the file at that size.
func (m *Memory) sameSize(st fileStat) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.this != nil {
		m.this[st.id] = st.size
	}
	n, ok := m.last[st.id]
	return ok && n == st.size
}

// Scan lists the weights a node can see in dirs.
//
// Each entry of each directory is a candidate: a weight file (.gguf,
// .safetensors, .bin, .pt, .pth) is weights; a directory is weights when it
// holds at least one weight file anywhere below it, and its size is every
// file in it. An empty directory is a half-finished download, not weights,
// because reporting it would send placement to a node whose engine then fails
// to load. Anything else is someone's notes and is skipped, and Dir.Skipped
// says so. A Hugging Face hub cache (models--org--name, or a directory of
// them) is reported per snapshot with its model id and revision.
//
// A candidate that looks like weights but is not finished (a shard listed in
// its index is missing, a split GGUF lacks a part, a .part or .incomplete
// file is still being written, a symlink is dangling) is reported with
// Complete false and a Problem, never as present.
//
// Storage differs at every installation (Lustre, NFS, an image exported over
// the fabric, local NVMe, an rsync), so Scan only observes the result: how
// the files got there is nobody's business here. Scanning nothing is the
// default and constrains nothing: Scan(nil) reports no weights, exactly as a
// scan that looked and found none, so that turning the feature on for one
// node does not make every other node look worse.
//
// A directory that does not exist is not an error (Dir.Missing): a mount that
// has not come back yet looks like this, and the node simply holds nothing
// there until it does. Every directory is scanned on its own under
// opt.DirTimeout, so a network mount that stops answering cannot stall the
// node: it is reported with Dir.Err and the others are reported as usual.
// A mount that is one entry of a directory loses only itself: it is
// reported incomplete, as not answering, beside the models read in time.
// The read stuck in the kernel cannot be interrupted; until it returns,
// later scans of that directory report it still stuck at once rather than
// block beside it.
//
// Weights are sorted by path and de-duplicated; Dirs follow the order of
// dirs, without repeats. Paths are made absolute. Scan is safe for
// concurrent use.
func Scan(ctx context.Context, dirs []string, opt Options) Inventory {
	opt = opt.withDefaults()
	var paths []string
	seen := map[string]bool{}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Clean(d)
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}

	opt.roots = paths
	opt.Memory.begin()
	defer opt.Memory.end()

	// Every directory at once: the time a scan takes is that of the slowest
	// directory, bounded by DirTimeout, not the sum of them.
	results := make([]result, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = dirBounded(ctx, p, opt)
		}()
	}
	wg.Wait()

	inv := Inventory{Weights: []Local{}, Dirs: make([]Dir, 0, len(paths))}
	have := map[string]bool{}
	for _, r := range results {
		inv.Dirs = append(inv.Dirs, r.dir)
		for _, w := range r.weights {
			if !have[w.Path] {
				have[w.Path] = true
				inv.Weights = append(inv.Weights, w)
			}
		}
	}
	sort.Slice(inv.Weights, func(i, j int) bool { return inv.Weights[i].Path < inv.Weights[j].Path })
	return inv
}

// result is what scanning one configured directory produced.
type result struct {
	dir     Dir
	weights []Local
	// rest, when set, is closed once the reads a partial result gave up
	// on have returned (see walker.partial).
	rest chan struct{}
}

func (r result) clone() result {
	r.dir.Skipped = slices.Clone(r.dir.Skipped)
	r.weights = slices.Clone(r.weights)
	return r
}

// rootRun is one scan of one directory, possibly still running.
type rootRun struct {
	started time.Time
	done    chan struct{} // closed when res is set
	res     result
	// callers counts the scans waiting on this run, the one that started
	// it included; guarded by inflight's lock. It makes the sharing
	// observable: a test can wait until every scan has joined.
	callers int
}

// inflight holds the scans in progress, by directory. A scan that outlived
// its timeout stays here until its goroutine returns, so that later scans of
// the same directory wait on it (or report it still stuck) instead of
// starting another goroutine to block beside it.
var inflight = struct {
	sync.Mutex
	m map[string]*rootRun
}{m: map[string]*rootRun{}}

// readRootFunc scans one configured directory. It is a variable so that tests
// can stand in a filesystem that never answers.
var readRootFunc = readRoot

// dirBounded scans dir, giving up after opt.DirTimeout or when ctx ends.
//
// A read from a hung NFS or FUSE mount blocks in the kernel and no Go code can
// interrupt it: the goroutine doing it stays blocked (holding one OS thread
// per blocked call, at most opt.Workers+1) until the filesystem answers or is
// unmounted. What Scan can do is not wait for it, and not add to it: while
// that goroutine lives, the directory's entry in inflight makes every later
// scan report "still not answering" at once instead of starting another.
// When the mount answers again the goroutine finishes, the entry goes, and
// the next scan reads the directory afresh.
//
// Concurrent scans of the same directory share one run for the same reason.
func dirBounded(ctx context.Context, dir string, opt Options) result {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return result{dir: Dir{Path: dir, Err: "not scanned: " + err.Error()}}
	}
	inflight.Lock()
	run, joined := inflight.m[dir]
	if !joined {
		run = &rootRun{started: start, done: make(chan struct{})}
		inflight.m[dir] = run
		rctx, cancel := context.WithTimeout(ctx, opt.DirTimeout)
		go func() {
			defer cancel()
			res := readRootFunc(rctx, dir, opt)
			res.dir.Took = time.Since(run.started)
			rest := res.rest
			res.rest = nil
			if rest == nil {
				inflight.Lock()
				delete(inflight.m, dir)
				inflight.Unlock()
			}
			run.res = res
			close(run.done)
			if rest != nil {
				// The partial result stands for this directory until
				// the reads stuck on one of its entries return, so that
				// later scans do not block beside them.
				<-rest
				inflight.Lock()
				delete(inflight.m, dir)
				inflight.Unlock()
			}
		}()
	}
	run.callers++
	inflight.Unlock()

	deadline := run.started.Add(opt.DirTimeout)
	if joined && !time.Now().Before(deadline) {
		select {
		case <-run.done:
			return run.res.clone()
		default:
		}
		return result{dir: Dir{Path: dir, Took: time.Since(start), Err: fmt.Sprintf(
			"still not answering, since %s (a hung network mount?); not read again until that read returns",
			run.started.UTC().Format(time.RFC3339))}}
	}
	// The walk itself stops at the deadline and reports what it finished;
	// partialGrace gives it the moment that takes. Past that, the
	// directory's own listing is what hangs, and nothing of it is known.
	timer := time.NewTimer(time.Until(deadline) + partialGrace)
	defer timer.Stop()
	select {
	case <-run.done:
		return run.res.clone()
	case <-timer.C:
		return result{dir: Dir{Path: dir, Took: time.Since(start),
			Err: timeoutMsg(context.DeadlineExceeded, opt.DirTimeout)}}
	case <-ctx.Done():
		return result{dir: Dir{Path: dir, Took: time.Since(start), Err: "scan interrupted: " + ctx.Err().Error()}}
	}
}

// partialGrace is how long past DirTimeout a scan waits for the walk's
// own partial result (see walker.partial) before reporting the whole
// directory as not answering.
const partialGrace = 500 * time.Millisecond

func timeoutMsg(err error, timeout time.Duration) string {
	if err == context.DeadlineExceeded {
		return fmt.Sprintf("not answering after %s (a hung network mount?)", timeout)
	}
	return "scan interrupted: " + err.Error()
}
