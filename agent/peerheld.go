package agent

// What the chunk server serves: the files this node holds for its fabric,
// by sha256, and the chunk the lease holder is reading from the origin.

import (
	"sync"

	"github.com/llmgw/llmgw/api"
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
	// live is the chunk this node is reading from the origin as the lease
	// holder, served with ?live=1 before it is verified; nil otherwise.
	live *liveChunk
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files == nil {
		r.files = map[string]*held{}
	}
	r.files[sum] = h
}

func (r *holdings) drop(sum string, h *held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files[sum] == h {
		delete(r.files, sum)
	}
}
