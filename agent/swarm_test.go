package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// standIn is a coordinator stand-in implementing the plan rules of
// api/swarm.go simply, for one fabric: one lease holder at a time (the
// member furthest ahead when it is free), expiring after leaseTTL without a
// report; chunk digests taken from the lease holder; bad peers dropped.
type standIn struct {
	t        *testing.T
	chunk    int64
	leaseTTL time.Duration

	mu        sync.Mutex
	members   map[string]*standInMember
	holder    string
	sums      []string
	bad       map[string]bool
	validator string
	leases    []string // every node that was given the lease, in order
}

type standInMember struct {
	addr     string
	have     []byte
	complete bool
	seen     time.Time
}

func newStandIn(t *testing.T, chunk int64, n int) *standIn {
	return &standIn{t: t, chunk: chunk, leaseTTL: 700 * time.Millisecond, members: map[string]*standInMember{}, bad: map[string]bool{}, sums: make([]string, n)}
}

func count(have []byte) int {
	n := 0
	for _, b := range have {
		for ; b != 0; b &= b - 1 {
			n++
		}
	}
	return n
}

// coordFor is the stand-in as seen by one node, whose peer address it
// learns as a node report would tell it.
type coordFor struct {
	s      *standIn
	addr   string
	killed atomic.Bool // a killed node's reports never arrive
}

func (c *coordFor) Swarm(ctx context.Context, r api.SwarmReport) (api.SwarmPlan, error) {
	if c.killed.Load() {
		return api.SwarmPlan{}, fmt.Errorf("node killed")
	}
	return c.s.plan(r, c.addr), nil
}

func (s *standIn) plan(r api.SwarmReport, addr string) api.SwarmPlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, b := range r.Bad {
		s.bad[b] = true
	}
	if r.Gone {
		delete(s.members, r.Node)
		if s.holder == r.Node {
			s.holder = ""
		}
		return api.SwarmPlan{}
	}
	m := s.members[r.Node]
	if m == nil {
		m = &standInMember{addr: addr}
		s.members[r.Node] = m
	}
	m.have, m.complete, m.seen = r.Have, r.Complete, now
	if r.Validator != "" && s.validator == "" {
		s.validator = r.Validator
	}
	if r.Node == s.holder || r.Complete {
		for i, v := range r.Sums {
			if i < len(s.sums) && s.sums[i] == "" {
				s.sums[i] = v
			}
		}
	}
	if h := s.members[s.holder]; s.holder != "" && (h == nil || now.Sub(h.seen) > s.leaseTTL) {
		s.holder = ""
	}
	anyComplete := false
	for n, o := range s.members {
		anyComplete = anyComplete || (o.complete && !s.bad[n])
	}
	if s.holder == "" && !anyComplete && !r.Complete {
		ahead := true
		for n, o := range s.members {
			if n != r.Node && now.Sub(o.seen) <= s.leaseTTL && count(o.have) > count(r.Have) {
				ahead = false
			}
		}
		if ahead {
			s.holder = r.Node
			s.leases = append(s.leases, r.Node)
		}
	}
	p := api.SwarmPlan{Lease: s.holder == r.Node, Holder: s.holder, ChunkSize: s.chunk, Sums: append([]string(nil), s.sums...), Validator: s.validator, ReportEvery: 100,
		Instance: "stand-in", AddrsBound: true}
	// Every member, with the address its munged speaks from (its chunk
	// server's host, 127.0.0.K): what its chunk server checks requesters
	// against.
	for n, o := range s.members {
		host, _, _ := net.SplitHostPort(o.addr)
		p.Members = append(p.Members, api.SwarmMember{Node: n, Addrs: []string{host}})
	}
	for i := range r.Sums {
		if i < len(s.sums) && s.sums[i] != "" {
			p.SumsKnown++
		}
	}
	for n, o := range s.members {
		if n != r.Node && !s.bad[n] {
			p.Peers = append(p.Peers, api.SwarmPeer{Node: n, Addr: o.addr, Have: o.have, Complete: o.complete})
		}
	}
	return p
}

// origin serves one file with Range and If-Range at a bounded rate and
// counts what it sends.
type swOrigin struct {
	data  []byte
	rate  int64 // bytes a second
	sent  atomic.Int64
	mu    sync.Mutex
	reqs  []string // "Range|If-Range"
	bytes []int    // how often each byte was sent
	url   string
}

func newSwOrigin(t *testing.T, data []byte, rate int64) *swOrigin {
	o := &swOrigin{data: data, rate: rate, bytes: make([]int, len(data))}
	o.url = serveOrigin(t, o)
	return o
}

// serveOrigin serves h on 127.0.0.1 until the test ends and returns the
// URL of its file, /model.bin.
func serveOrigin(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String() + "/model.bin"
}

func (o *swOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.reqs = append(o.reqs, r.Header.Get("Range")+"|"+r.Header.Get("If-Range"))
	o.mu.Unlock()
	w.Header().Set("ETag", `"v1"`)
	http.ServeContent(&countingWriter{ResponseWriter: w, o: o, off: startOf(r.Header.Get("Range"))}, r, "model.bin", time.Unix(1e9, 0), bytes.NewReader(o.data))
}

func startOf(rng string) int64 {
	var a int64
	fmt.Sscanf(rng, "bytes=%d-", &a)
	return a
}

type countingWriter struct {
	http.ResponseWriter
	o   *swOrigin
	off int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := min(len(p), 64<<10)
		time.Sleep(time.Duration(int64(n) * int64(time.Second) / c.o.rate))
		m, err := c.ResponseWriter.Write(p[:n])
		c.o.sent.Add(int64(m))
		c.o.mu.Lock()
		for i := c.off; i < c.off+int64(m) && i < int64(len(c.o.bytes)); i++ {
			c.o.bytes[i]++
		}
		c.o.mu.Unlock()
		c.off += int64(m)
		if err != nil {
			return 0, err
		}
		p = p[n:]
	}
	return total, nil
}

// testNode is one agent's swarm side: its chunk server on its own
// 127.0.0.K address, its munged, its cache directory.
type testNode struct {
	name, addr string
	codec      munge.Codec
	files      *holdings
	srv        *http.Server
	dir        string
	coord      *coordFor
	cancel     context.CancelFunc
	done       chan error
	sw         *swarm
	fromOrigin atomic.Int64
	fromPeers  atomic.Int64
}

func startNode(t *testing.T, realm *mungetest.Realm, k int, si *standIn) *testNode {
	ip := fmt.Sprintf("127.0.0.%d", k)
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{name: fmt.Sprintf("n%d", k), addr: l.Addr().String(), codec: realm.Start(ip), files: &holdings{}, dir: t.TempDir()}
	n.srv = &http.Server{Handler: newPeerServer(n.addr, "ib-a", n.codec, n.dir, n.files)}
	go n.srv.Serve(l)
	t.Cleanup(func() { n.srv.Close() })
	n.coord = &coordFor{s: si, addr: n.addr}
	return n
}

func (n *testNode) fetch(t *testing.T, o *swOrigin, sum string) {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done = make(chan error, 1)
	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(os.Stderr)
	}
	target := filepath.Join(n.dir, "model.bin")
	n.sw = &swarm{coord: n.coord, codec: n.codec, node: n.name, fabric: "ib-a", source: o.url, sum: sum, size: int64(len(o.data)),
		target: target, part: target + ".part", origin: http.DefaultClient, peer: peerClient(), files: n.files, log: log,
		onBytes: func(from string, b int64) {
			if from == "origin" {
				n.fromOrigin.Add(b)
			} else {
				n.fromPeers.Add(b)
			}
		}}
	go func() { n.done <- n.sw.run(ctx) }()
	t.Cleanup(cancel)
}

// kill stops the node as a crash would: no Gone, its chunk server gone.
func (n *testNode) kill() {
	n.coord.killed.Store(true)
	n.srv.Close()
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
	}
}

func (n *testNode) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-n.done:
		if err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: swarm fetch did not finish within %s", n.name, d)
	}
}

func (n *testNode) check(t *testing.T, data []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(n.dir, "model.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%s: the cache file is not the origin's (%v)", n.name, err)
	}
}

func testData(t testing.TB, size int) ([]byte, string) {
	data := make([]byte, size)
	rand.Read(data)
	h := sha256.Sum256(data)
	return data, hex.EncodeToString(h[:])
}

const testChunk = 256 << 10

func TestSwarmOneOriginCopyForThreeNodes(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, 16*testChunk+1234)
	o := newSwOrigin(t, data, 8<<20)
	si := newStandIn(t, testChunk, 17)
	nodes := []*testNode{startNode(t, realm, 11, si), startNode(t, realm, 12, si), startNode(t, realm, 13, si)}
	nodes[0].fetch(t, o, sum)
	// The seed holds the lease before the others ask: a fixed pause here
	// (150 ms) let a slow first ask on a loaded machine hand the lease to
	// n12, which then read the origin and failed the test below.
	until(t, 10*time.Second, nodes[0].name+" holds the lease", func() bool {
		si.mu.Lock()
		defer si.mu.Unlock()
		return si.holder == nodes[0].name
	})
	nodes[1].fetch(t, o, sum)
	nodes[2].fetch(t, o, sum)
	for _, n := range nodes {
		n.wait(t, 30*time.Second)
		n.check(t, data)
	}
	if got := o.sent.Load(); got != int64(len(data)) {
		t.Errorf("origin sent %d bytes for a %d-byte file, want exactly one copy", got, len(data))
	}
	if nodes[1].fromOrigin.Load() != 0 || nodes[2].fromOrigin.Load() != 0 {
		t.Errorf("non-seeds read the origin: %d, %d bytes", nodes[1].fromOrigin.Load(), nodes[2].fromOrigin.Load())
	}
	t.Logf("origin %d bytes; n12 from peers %d, n13 from peers %d", o.sent.Load(), nodes[1].fromPeers.Load(), nodes[2].fromPeers.Load())
}

// flipping serves like a peer but flips one byte of every body.
type flipping struct{ h http.Handler }

func (f flipping) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.h.ServeHTTP(&flipWriter{ResponseWriter: w}, r)
}

type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (f *flipWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

func (f *flipWriter) Write(p []byte) (int, error) {
	if !f.done && len(p) > 0 {
		q := append([]byte(nil), p...)
		q[len(q)/2] ^= 0xff
		f.done = true
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}

func TestSwarmDropsABadPeer(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, 8*testChunk+7)
	o := newSwOrigin(t, data, 32<<20)
	si := newStandIn(t, testChunk, 9)
	seed, bad, n3 := startNode(t, realm, 31, si), startNode(t, realm, 32, si), startNode(t, realm, 33, si)
	seed.fetch(t, o, sum)
	seed.wait(t, 30*time.Second)
	bad.fetch(t, o, sum)
	bad.wait(t, 30*time.Second)
	// The only holder left is one that corrupts what it sends.
	seed.kill()
	si.mu.Lock()
	delete(si.members, seed.name)
	si.mu.Unlock()
	bad.srv.Handler = flipping{bad.srv.Handler}
	n3.fetch(t, o, sum)
	n3.wait(t, 30*time.Second)
	n3.check(t, data)
	si.mu.Lock()
	dropped := si.bad[bad.name]
	si.mu.Unlock()
	if !dropped {
		t.Errorf("the peer that flipped a byte was not reported bad")
	}
	// The seed read one copy; with the seed gone and the only other holder
	// lying, n33 reads the second from the origin, and what it read from
	// the liar was all rejected.
	if got, want := o.sent.Load(), 2*int64(len(data)); got != want {
		t.Errorf("origin sent %d bytes, want two copies (%d): the seed's and n33's once no honest holder is left", got, want)
	}
	t.Logf("origin %d bytes = %.2f copies; n33 read %d bytes from the lying peer, all rejected", o.sent.Load(), float64(o.sent.Load())/float64(len(data)), n3.fromPeers.Load())
}
