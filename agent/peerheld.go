package agent

// What the chunk server serves: the files this node holds for its fabric,
// by sha256, and the chunk the lease holder is reading from the origin.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// held is one file the node can serve to its fabric, by its sha256: a swarm
// fetch in progress (its .part and the chunks verified so far) or a file
// complete in the cache.
type held struct {
	mu        sync.Mutex
	path      string // the .part while fetching, then the cache file
	size      int64
	chunkSize int64
	have      []byte
	complete  bool
	// chunked says chunkSize is the swarm's: set for a swarm fetch's file,
	// not for one a Fetcher fetched (holdComplete), whose chunk size is a
	// guess (held.oneChunk).
	chunked bool
	// source is the file's source, for the report that withdraws it from
	// its swarm when the file is gone (holdings.drop's callers).
	source string
	// id is the file as it was held (holdings.put records it): every
	// answer checks it first (open), so that a file removed (gc) or
	// replaced (same size, other bytes) is dropped, not served under the
	// digest it no longer has.
	id fileID
	// live is the chunk this node is reading from the origin as the lease
	// holder, served with ?live=1 before it is verified; nil otherwise.
	live *liveChunk
	// members are who may read this file from this node, as the latest
	// plan of its swarm lists them (api.SwarmPlan.Members); nil before any
	// plan: nobody (peermembers.go).
	members *swarmMembers
	// membersVersion is the version of the plan members came from,
	// which reports give back (api.SwarmReport.MembersVersion).
	membersVersion uint64
	// refresh, when set, asks the coordinator for a plan now, and so for
	// the members; refreshMu serialises the asks, and refreshed is when
	// the last began.
	refresh   func(context.Context) error
	refreshMu sync.Mutex
	refreshed time.Time
	// rev, when set, is a revision of several files (swarmrev.go): what
	// open reads and check checks instead of path.
	rev *revision
}

// heldFile is what an answer reads a held file's bytes from.
type heldFile interface {
	io.ReaderAt
	io.Closer
}

// liveChunk is one chunk as it arrives from the origin: buf[:n] has come,
// and wake is closed (and replaced) whenever n grows or the read breaks.
type liveChunk struct {
	i    int
	from int64
	buf  []byte

	mu     sync.Mutex
	n      int
	broken bool
	wake   chan struct{}
}

func newLiveChunk(i int, from int64, buf []byte) *liveChunk {
	return &liveChunk{i: i, from: from, buf: buf, wake: make(chan struct{})}
}

// grew says buf[:n] has arrived.
func (c *liveChunk) grew(n int) {
	c.mu.Lock()
	c.n = n
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// fail says the origin read broke: the rest of the chunk will not come
// through this buffer.
func (c *liveChunk) fail() {
	c.mu.Lock()
	c.broken = true
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

func (c *liveChunk) state() (int, bool, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.broken, c.wake
}

func (h *held) setLive(c *liveChunk) {
	h.mu.Lock()
	h.live = c
	h.mu.Unlock()
}

func (h *held) verified(from, to int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.complete {
		return true
	}
	for i := from / h.chunkSize; i <= to/h.chunkSize; i++ {
		if !api.HasChunk(h.have, int(i)) {
			return false
		}
	}
	return true
}

func (h *held) mark(i int) {
	h.mu.Lock()
	h.have = api.SetChunk(h.have, i)
	h.mu.Unlock()
}

// unmark takes chunk i back: it was verified against a digest found false
// (swarm.unland).
func (h *held) unmark(i int) {
	h.mu.Lock()
	if i >= 0 && i/8 < len(h.have) {
		h.have[i/8] &^= 1 << (i % 8)
	}
	h.mu.Unlock()
}

// holdings is the in-process registry the chunk server answers from: keyed
// by sha256, never by a name from a request, so a request can only ever
// reach a file this agent put in its cache directory itself.
type holdings struct {
	mu    sync.Mutex
	files map[string]*held
}

func (r *holdings) get(sum string) *held {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.files[sum]
}

func (r *holdings) put(sum string, h *held) {
	h.mu.Lock()
	if h.id == (fileID{}) {
		h.id = statID(h.path)
	}
	h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files == nil {
		r.files = map[string]*held{}
	}
	r.files[sum] = h
}

// putComplete holds a verified cache file, in place of a complete entry
// for the same sum (the file may have been fetched again since), never of
// a swarm fetch's entry: that fetch owns it, and makes it complete itself.
func (r *holdings) putComplete(sum string, h *held) {
	if old := r.get(sum); old != nil {
		old.mu.Lock()
		fetching := !old.complete
		old.mu.Unlock()
		if fetching {
			return
		}
	}
	r.put(sum, h)
}

// sweep drops the complete entries whose file is gone or changed (check)
// and returns them, so that their swarms are told: the chunk server finds
// them too when it is asked, but a file nobody asks for would otherwise
// stay offered to the fabric until the coordinator forgets it.
func (r *holdings) sweep() map[string]*held {
	r.mu.Lock()
	all := make(map[string]*held, len(r.files))
	for sum, h := range r.files {
		all[sum] = h
	}
	r.mu.Unlock()
	out := map[string]*held{}
	for sum, h := range all {
		if !h.isComplete() {
			continue
		}
		if err := h.check(sum); err != nil {
			r.drop(sum, h)
			out[sum] = h
		}
	}
	return out
}

func (h *held) isComplete() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.complete
}

// completeAt says the file is now whole and verified at path, as it is
// now on disk.
func (h *held) completeAt(path string) {
	id := statID(path)
	h.mu.Lock()
	h.path, h.complete, h.id = path, true, id
	h.mu.Unlock()
}

// fileID is a held file's identity: its inode, and for a complete file
// its size and modification time too (a .part grows and is written as
// chunks land; a complete file does not change).
type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
}

func statID(path string) fileID {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	return idOf(fi)
}

// errMoving is a fetch's .part that could not be opened: it is being
// renamed into place, and the reader may ask again at once.
var errMoving = errors.New("moved; ask again")

// same says whether got is the file held as id.
func (h *held) same(id, got fileID, complete bool) bool {
	if complete {
		return got == id
	}
	return got.dev == id.dev && got.ino == id.ino
}

// open opens the held file for an answer, checked against what was held:
// the same inode, and for a complete file the same size and mtime, or else
// a file that carries this sum's recorded digest (catalog.SumXattr, which
// is trusted only while the file's size and mtime are those it was hashed
// at: a file fetched again at the same pin). A complete file that is gone
// or is other bytes is an error: the caller drops the entry. A .part that
// is gone is errMoving: its fetch renamed it, or will drop the entry.
func (h *held) open(sum string) (heldFile, error) {
	if h.rev != nil {
		return h.rev.open(h.isComplete())
	}
	for try := 0; ; try++ {
		h.mu.Lock()
		path, id, complete := h.path, h.id, h.complete
		h.mu.Unlock()
		fh, err := os.Open(path)
		if err != nil {
			h.mu.Lock()
			moved := h.path != path
			h.mu.Unlock()
			switch {
			case moved && try == 0:
				continue // renamed into place between the two reads
			case !complete:
				return nil, errMoving
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		fi, err := fh.Stat()
		if err != nil {
			fh.Close()
			return nil, err
		}
		got := idOf(fi)
		if h.same(id, got, complete) {
			return fh, nil
		}
		if complete && got.size == h.size {
			if rec, _ := catalog.RecordedSHA256(path); rec == sum && statID(path) == got {
				h.mu.Lock()
				if h.path == path {
					h.id = got
				}
				h.mu.Unlock()
				return fh, nil
			}
		}
		fh.Close()
		return nil, fmt.Errorf("%s is no longer the file held for sha256 %s (replaced or written since)", path, sum)
	}
}

// check is open without the answer: nil while the entry can be served.
func (h *held) check(sum string) error {
	fh, err := h.open(sum)
	if err != nil {
		return err
	}
	return fh.Close()
}

func (r *holdings) drop(sum string, h *held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files[sum] == h {
		delete(r.files, sum)
	}
}
