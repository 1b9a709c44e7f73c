// Package swarmtest is a hostile swarm member, for tests and for the
// fan-out benchmark's liars: a node that speaks the swarm's report and
// chunk protocols (api/swarm.go) with its own host's MUNGE credentials,
// which is what root on one node of a fabric can do, and misbehaves in one
// chosen way. It links the protocol (api) and MUNGE alone, no agent or
// coordinator code, so that what it does is what any program could.
//
// A Member reports to the coordinator as a member of one swarm, claiming
// what it is told to (the whole file, made-up digests, origin bytes it
// never read), and answers every chunk request on its chunk server as its
// Serve says. SlowReads is the other side: a reader that holds a chunk
// server's upload slots open while reading next to nothing.
package swarmtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
)

// Serve is how a Member's chunk server answers a request for a chunk.
type Serve string

const (
	// ServeBusy answers 503 with Retry-After, word for word what an
	// honest holder whose upload slots are full answers.
	ServeBusy Serve = "busy"
	// Serve503 answers 503 without Retry-After ("moved; ask again").
	Serve503 Serve = "503"
	// Serve404 answers 404: it holds no such file.
	Serve404 Serve = "404"
	// Serve416 answers 416: the chunk is not verified here.
	Serve416 Serve = "416"
	// ServeJunk answers 206 with the range's length of random bytes.
	ServeJunk Serve = "junk"
	// ServeHang answers 206, sends half the range and then nothing,
	// keeping the connection open until the request ends.
	ServeHang Serve = "hang"
	// ServeTrickle answers 206 and sends one random byte every 900 ms,
	// under a reader's one-second stall timer.
	ServeTrickle Serve = "trickle"
	// ServeForged answers 206 with the member's forged bytes of the
	// range (Forged): with MadeUpSums, bytes that match the digests it
	// reports, so that a reader's chunk check passes and only the whole
	// file fails the pin.
	ServeForged Serve = "forged"
)

// Forged is chunk i of node's forged file in chunks of chunkSize of a file
// of size bytes: the same bytes every time, none of them the file's.
func Forged(node string, i int, chunkSize, size int64) []byte {
	from := int64(i) * chunkSize
	n := max(min(chunkSize, size-from), 0)
	seed := sha256.Sum256([]byte(fmt.Sprintf("swarmtest forged %s %d %d", node, i, chunkSize)))
	b := make([]byte, n)
	mrand.NewChaCha8(seed).Read(b)
	return b
}

// Member is one hostile member of one swarm. Set the fields, then Run.
type Member struct {
	// Node and Fabric are what it reports; Coord authenticates as Node
	// (its host's munged).
	Node, Fabric string
	Coord        *api.Client
	// Addr is the host:port its chunk server listens on and reports as
	// its peer_addr (port 0: any, and Addr is then the one it got).
	Addr string

	// The swarm it joins, and the chunk size and size it reports (a squat
	// reports other ones than the honest members).
	Source, SHA256  string
	Size, ChunkSize int64

	// Complete claims the whole file, verified against the pin.
	Complete bool
	// HaveNone claims no chunk verified (a lease holder that only says it
	// reads); otherwise the member claims every chunk.
	HaveNone bool
	// MadeUpSums sends a digest for every chunk that matches no bytes
	// of the file: random ones, or, serving ServeForged, those of its
	// forged bytes.
	MadeUpSums bool
	// FakeOriginBytes is added to the origin bytes it claims at every
	// report: a lease holder that counts progress it never made.
	FakeOriginBytes int64
	// Serve is how its chunk server answers.
	Serve Serve
	// Every is its report interval (default 250 ms).
	Every time.Duration

	mu      sync.Mutex
	answers map[int]int // chunk requests by status answered
	plans   int
	leases  int
	lastErr error
	refused int
	last    api.SwarmPlan
	done    chan struct{}
}

// Update changes the member's behaviour while it runs: f is called with
// its fields locked, and the next report and chunk answer follow them.
func (m *Member) Update(f func(*Member)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// LastPlan is the last plan the coordinator gave the member.
func (m *Member) LastPlan() api.SwarmPlan {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Run posts one node report (the coordinator admits to swarms only nodes
// that reported, and learns their chunk server's address from it), starts
// the chunk server and reports to the swarm every Every until ctx ends. It
// returns once the chunk server listens and the node report was taken;
// everything after runs in the background.
func (m *Member) Run(ctx context.Context) error {
	if m.Every <= 0 {
		m.Every = 250 * time.Millisecond
	}
	m.mu.Lock()
	m.answers = map[int]int{}
	m.done = make(chan struct{})
	m.mu.Unlock()
	l, err := net.Listen("tcp", m.Addr)
	if err != nil {
		close(m.done)
		return err
	}
	// Port 0 takes any: the one it got is what it reports.
	m.mu.Lock()
	m.Addr = l.Addr().String()
	m.mu.Unlock()
	srv := &http.Server{Handler: http.HandlerFunc(m.serveChunk), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	now := time.Now()
	if _, err := m.Coord.PostReport(ctx, &api.Report{ID: m.Node + "-liar", Seq: 1, Started: now, Time: now, Node: m.Node, Fabric: m.Fabric,
		Looked: true, AgentVersion: "swarmtest", PeerAddr: m.Addr, Cache: api.Cache{Dir: "/nonexistent", FreeBytes: 1e12, TotalBytes: 2e12}}); err != nil {
		srv.Close()
		<-served
		close(m.done)
		return fmt.Errorf("%s's node report: %w", m.Node, err)
	}
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		m.report(ctx)
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
		<-served
		<-reported
		close(m.done)
	}()
	return nil
}

// Done is closed once a member whose Run's context ended has stopped: its
// chunk server closed (its address free again) and its reports over.
func (m *Member) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// claims is what the member says in a report, from its fields as they
// are: the chunks it claims (every one), and its digests.
type claims struct {
	size, chunk int64
	complete    bool
	none        bool
	madeUp      bool
	forged      bool
	have        []byte
	sums        map[int]string
}

func (m *Member) claimsNow(old *claims) *claims {
	m.mu.Lock()
	c := &claims{size: m.Size, chunk: m.ChunkSize, complete: m.Complete, none: m.HaveNone, madeUp: m.MadeUpSums, forged: m.Serve == ServeForged}
	node := m.Node
	m.mu.Unlock()
	if old != nil && old.size == c.size && old.chunk == c.chunk && old.none == c.none && old.madeUp == c.madeUp && old.forged == c.forged {
		c.have, c.sums = old.have, old.sums
		return c
	}
	n := 0
	if c.chunk > 0 {
		n = int((c.size + c.chunk - 1) / c.chunk)
	}
	for i := range n {
		if !c.none {
			c.have = api.SetChunk(c.have, i)
		}
	}
	if c.madeUp {
		c.sums = map[int]string{}
		for i := range n {
			b := make([]byte, 32)
			rand.Read(b)
			if c.forged {
				h := sha256.Sum256(Forged(node, i, c.chunk, c.size))
				b = h[:]
			}
			c.sums[i] = hex.EncodeToString(b)
		}
	}
	return c
}

// report sends the member's claims every Every, as its fields say at each.
func (m *Member) report(ctx context.Context) {
	var c *claims
	var origin int64
	t := time.NewTicker(m.Every)
	defer t.Stop()
	for {
		c = m.claimsNow(c)
		m.mu.Lock()
		origin += m.FakeOriginBytes
		r := api.SwarmReport{Node: m.Node, Source: m.Source, SHA256: m.SHA256, Size: c.size, ChunkSize: c.chunk,
			Have: c.have, Sums: c.sums, Complete: c.complete, FromOrigin: origin}
		m.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		p, err := m.Coord.Swarm(rctx, r)
		cancel()
		m.mu.Lock()
		m.lastErr = err
		if err != nil {
			m.refused++
		}
		if err == nil {
			m.plans++
			m.last = p
			if p.Lease {
				m.leases++
			}
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveChunk answers any chunk request as m.Serve says, without checking
// who asks: a liar has no reason to.
func (m *Member) serveChunk(w http.ResponseWriter, r *http.Request) {
	from, to, ok := rangeOf(r.Header.Get("Range"))
	m.mu.Lock()
	serve, node, size, chunk := m.Serve, m.Node, m.Size, m.ChunkSize
	m.mu.Unlock()
	code := http.StatusPartialContent
	switch serve {
	case ServeBusy:
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case Serve503:
		code = http.StatusServiceUnavailable
	case Serve404:
		code = http.StatusNotFound
	case Serve416:
		code = http.StatusRequestedRangeNotSatisfiable
	}
	if !ok && code == http.StatusPartialContent {
		code = http.StatusRequestedRangeNotSatisfiable
	}
	var forged []byte
	if code == http.StatusPartialContent && serve == ServeForged {
		// Within one chunk of its own chunk size, as an honest holder's.
		if i := from / max(chunk, 1); chunk <= 0 || to >= min((i+1)*chunk, size) {
			code = http.StatusRequestedRangeNotSatisfiable
		} else {
			forged = Forged(node, int(i), chunk, size)[from-i*chunk : to-i*chunk+1]
		}
	}
	m.mu.Lock()
	m.answers[code]++
	m.mu.Unlock()
	if code != http.StatusPartialContent {
		http.Error(w, "swarmtest: "+string(serve), code)
		return
	}
	n := to - from + 1
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, size))
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(code)
	rc := http.NewResponseController(w)
	switch serve {
	case ServeForged:
		w.Write(forged)
	case ServeHang:
		junk := make([]byte, n/2)
		rand.Read(junk)
		w.Write(junk)
		rc.Flush()
		<-r.Context().Done()
	case ServeTrickle:
		b := make([]byte, 1)
		for range n {
			rand.Read(b)
			if _, err := w.Write(b); err != nil {
				return
			}
			rc.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(900 * time.Millisecond):
			}
		}
	default:
		junk := make([]byte, n)
		rand.Read(junk)
		w.Write(junk)
	}
}

// rangeOf reads "bytes=A-B".
func rangeOf(h string) (from, to int64, ok bool) {
	var a, b int64
	if _, err := fmt.Sscanf(h, "bytes=%d-%d", &a, &b); err != nil || a < 0 || b < a {
		return 0, 0, false
	}
	return a, b, true
}

// Answers returns how many chunk requests the member answered, by status.
func (m *Member) Answers() map[int]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int]int{}
	for k, v := range m.answers {
		out[k] = v
	}
	return out
}

// Requests is how many chunk requests the member answered in all.
func (m *Member) Requests() int {
	n := 0
	for _, v := range m.Answers() {
		n += v
	}
	return n
}

// Refused is how many of the member's reports the coordinator refused (or
// that failed).
func (m *Member) Refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused
}

// Plans returns how many plans the coordinator gave the member, how many
// of them with the lease, and the last report's error.
func (m *Member) Plans() (plans, leases int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plans, m.leases, m.lastErr
}
