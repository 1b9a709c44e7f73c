package agent

// The swarm's faults (issue 18) against the real coordinator: its server
// with a real sqlite file and MUNGE on 127.0.0.1, nodes on 127.0.0.K each
// with its own munged, an origin that knows each node by its source address
// and peers whose chunk servers log every request. Every request, to the
// origin or to a peer, is checked at the moment it arrives against what the
// requesting node had verified then: no verified chunk is fetched twice.
//
// The agent package may not import the coordinator (cmd/llmgw
// TestImportDirections), but that rule reads the packages' own imports, not
// their tests': a test may run the real server beside the agent.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/coordinator"
)

// knownNodes is the coordinator's node list (Slurm's in production).
type knownNodes []coordinator.KnownNode

func (k knownNodes) KnownNodes(context.Context) ([]coordinator.KnownNode, error) {
	return append([]coordinator.KnownNode{}, k...), nil
}

// startCoordinator runs the real coordinator on 127.0.0.1 with MUNGE, for
// the nodes named (name -> 127.0.0.K), and returns its URL; set, when
// given, changes its configuration (swarm_liars_test.go's coordProc).
func startCoordinator(t testing.TB, realm *mungetest.Realm, nodes map[string]string, minChunk int64, set ...func(*coordinator.Config)) string {
	t.Helper()
	return newCoordProc(t, realm, nodes, minChunk, set...).url
}

// addCatalogFile makes source (pinned to sum, size bytes) a model of the
// catalog of the coordinator at url: a swarm is only for a catalog file.
func addCatalogFile(t testing.TB, url, source, sum string, size int64) {
	t.Helper()
	admin := &api.Client{BaseURL: url, Token: "admin-secret"}
	if _, err := admin.PutModel(context.Background(), api.Model{Name: "model", Source: source, SHA256: sum, Size: size}); err != nil {
		t.Fatal(err)
	}
}

// fabricEnv is one fabric (ib-a) fetching one file.
type fabricEnv struct {
	t     testing.TB
	realm *mungetest.Realm
	url   string // the coordinator's
	data  []byte
	sum   string
	chunk int64
	o     *fOrigin
	nodes map[string]*fnode
	files map[string]*holdings // each node's, to check what it asks for

	mu         sync.Mutex
	peerLog    []peerReq
	peerBytes  map[string]int64 // by requester
	violations []string
}

type peerReq struct {
	server, node string
	chunk        int64
	at           time.Time
	live         bool // ?live=1: the chunk the server was reading from the origin
}

// emptyFabric is a fabric of realm that fetches data (of sum) in chunks of
// chunk, with no coordinator, origin or node yet.
func emptyFabric(t testing.TB, realm *mungetest.Realm, data []byte, sum string, chunk int64) *fabricEnv {
	return &fabricEnv{t: t, realm: realm, data: data, sum: sum, chunk: chunk, nodes: map[string]*fnode{}, files: map[string]*holdings{}, peerBytes: map[string]int64{}}
}

func newFabric(t testing.TB, chunks int, chunk, originRate int64, names ...int) *fabricEnv {
	realm := mungetest.New(t)
	data, sum := testData(t, chunks*int(chunk)-777)
	e := emptyFabric(t, realm, data, sum, chunk)
	ips := map[string]string{}
	for _, k := range names {
		ips[fmt.Sprintf("n%d", k)] = fmt.Sprintf("127.0.0.%d", k)
	}
	e.url = startCoordinator(t, realm, ips, chunk)
	e.o = newFOrigin(t, e, originRate)
	for _, k := range names {
		e.startNode(k)
	}
	return e
}

// checkFetch records a violation when node asks for bytes lo..hi of which
// it had already verified a chunk.
func (e *fabricEnv) checkFetch(node, from string, lo, hi int64) {
	e.mu.Lock()
	files := e.files[node]
	e.mu.Unlock()
	if files == nil {
		return
	}
	h := files.get(e.sum)
	if h == nil {
		return
	}
	for i := lo / e.chunk; i <= hi/e.chunk; i++ {
		if h.verified(i*e.chunk, i*e.chunk) {
			e.mu.Lock()
			e.violations = append(e.violations, fmt.Sprintf("%s asked %s for chunk %d, which it had verified", node, from, i))
			e.mu.Unlock()
		}
	}
}

// fOrigin serves the file with Range and If-Range at a bounded rate, and
// knows each request's node by its source address.
type fOrigin struct {
	e    *fabricEnv
	rate int64
	url  string
	// stall, when set, is a node whose responses stop sending (without
	// closing) once the origin has sent stallAt bytes in all; stalled is
	// closed then.
	stall   string
	stallAt int64
	stalled chan struct{}
	stallMu sync.Once
	sent    atomic.Int64
	// cuts, while above 0, is how many more answers are cut (the
	// connection dropped) once they have sent cutAfter bytes.
	cuts     atomic.Int64
	cutAfter int64

	mu        sync.Mutex
	reqs      []originReq
	byNode    map[string]int64
	active    int
	maxActive int
}

type originReq struct {
	node       string
	from, to   int64
	ifRange    string
	start, end time.Time
	sent       int64
}

func newFOrigin(t testing.TB, e *fabricEnv, rate int64) *fOrigin {
	o := &fOrigin{e: e, rate: rate, byNode: map[string]int64{}}
	o.url = serveOrigin(t, o)
	if e.url != "" && e.sum != "" {
		// The coordinator plans swarms only for catalog files.
		addCatalogFile(t, e.url, o.url, e.sum, int64(len(e.data)))
	}
	return o
}

func (o *fOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	node := "n" + host[strings.LastIndexByte(host, '.')+1:]
	size := int64(len(o.e.data))
	from, to := int64(0), size-1
	if rng := r.Header.Get("Range"); rng != "" {
		var err error
		if from, to, err = parseRange(rng, size); err != nil {
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
	}
	o.e.checkFetch(node, "the origin", from, to)
	o.mu.Lock()
	i := len(o.reqs)
	o.reqs = append(o.reqs, originReq{node: node, from: from, to: to, ifRange: r.Header.Get("If-Range"), start: time.Now()})
	o.active++
	o.maxActive = max(o.maxActive, o.active)
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.active--
		o.reqs[i].end = time.Now()
		o.mu.Unlock()
	}()
	w.Header().Set("ETag", `"v1"`)
	tw := &throttled{ResponseWriter: w, rate: o.rate, count: func(n int) {
		o.sent.Add(int64(n))
		o.mu.Lock()
		o.byNode[node] += int64(n)
		o.reqs[i].sent += int64(n)
		o.mu.Unlock()
	}}
	if o.cuts.Load() > 0 {
		tw.hold = func(wrote int64) {
			if wrote >= o.cutAfter && o.cuts.Add(-1) >= 0 {
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
				panic(http.ErrAbortHandler)
			}
		}
	}
	if node == o.stall {
		tw.hold = func(int64) {
			if o.sent.Load() < o.stallAt {
				return
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			o.stallMu.Do(func() { close(o.stalled) })
			<-r.Context().Done()
		}
	}
	http.ServeContent(tw, r, "model.bin", time.Unix(1e9, 0), bytes.NewReader(o.e.data))
}

func (o *fOrigin) requests() []originReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]originReq(nil), o.reqs...)
}

// throttled writes at most rate bytes a second (0: unbounded), in 32 KiB
// pieces, counting what it wrote; hold, when set, is called before each
// piece and may block.
type throttled struct {
	http.ResponseWriter
	rate  int64
	count func(int)
	hold  func(written int64)
	wrote int64
}

// Unwrap lets http.ResponseController flush through it, as the live
// chunk server does after each piece.
func (t *throttled) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *throttled) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if t.hold != nil {
			t.hold(t.wrote)
		}
		n := min(len(p), 32<<10)
		if t.rate > 0 {
			time.Sleep(time.Duration(int64(n) * int64(time.Second) / t.rate))
		}
		m, err := t.ResponseWriter.Write(p[:n])
		t.wrote += int64(m)
		t.count(m)
		if err != nil {
			return 0, err
		}
		p = p[n:]
	}
	return total, nil
}

// fnode is one node: its chunk server on 127.0.0.K behind a tap that logs
// and checks every request, its munged, its cache directory, its swarm.
type fnode struct {
	e               *fabricEnv
	name, ip, addr  string
	codec           munge.Codec
	files           *holdings
	srv             *http.Server
	dir             string
	client          *api.Client
	killed          atomic.Bool
	coordDown       atomic.Bool // the coordinator is down for this node
	peerRate        int64
	peer            *http.Client
	sw              *swarm
	cancel          context.CancelFunc
	done            chan error
	fromOriginCount atomic.Int64
	fromPeersCount  atomic.Int64
	grace           time.Duration // the swarm's planGrace, when set
	hang            atomic.Bool   // serve half a chunk, then stop sending
	stuck           chan peerReq  // the responses that stopped
	release         chan struct{} // closed at the end: hung handlers return
	servedTo        map[string]int
	servedMu        sync.Mutex
	busyTo          string        // a node told 503 busy, as at maxUploads
	busyLive        map[int64]int // live reads told 503 busy, by chunk
	flipLiveTo      string        // a node whose live reads get a byte flipped
}

func (e *fabricEnv) startNode(k int) *fnode {
	t := e.t
	ip := fmt.Sprintf("127.0.0.%d", k)
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	n := &fnode{e: e, name: fmt.Sprintf("n%d", k), ip: ip, addr: l.Addr().String(), codec: e.realm.Start(ip), files: &holdings{},
		dir: t.TempDir(), stuck: make(chan peerReq, 16), release: make(chan struct{}), servedTo: map[string]int{}, busyLive: map[int64]int{}, peer: peerClient(),
		peerRate: 16 << 20}
	n.srv = &http.Server{Handler: n.tap(newPeerServer(n.addr, "ib-a", n.codec, n.dir, n.files))}
	go n.srv.Serve(l)
	t.Cleanup(func() {
		close(n.release)
		n.srv.Close()
	})
	n.client = &api.Client{BaseURL: e.url, Auth: munge.Authenticator{Codec: n.codec}}
	now := time.Now()
	if _, err := n.client.PostReport(context.Background(), &api.Report{ID: n.name + "-1", Seq: 1, Started: now, Time: now,
		Node: n.name, Fabric: "ib-a", Looked: true, AgentVersion: "test", PeerAddr: n.addr,
		Cache: api.Cache{Dir: n.dir, FreeBytes: 1e12, TotalBytes: 2e12}}); err != nil {
		t.Fatalf("%s's report: %v", n.name, err)
	}
	e.nodes[n.name] = n
	e.mu.Lock()
	e.files[n.name] = n.files
	e.mu.Unlock()
	return n
}

// Swarm is the coordinator as the node's swarm sees it: after a crash its
// reports never arrive.
func (n *fnode) Swarm(ctx context.Context, r api.SwarmReport) (api.SwarmPlan, error) {
	if n.killed.Load() {
		return api.SwarmPlan{}, errors.New("node killed")
	}
	if n.coordDown.Load() {
		// Down as a stopped coordinator is: nothing listens.
		return (&api.Client{BaseURL: "http://127.0.0.1:1"}).Swarm(ctx, r)
	}
	return n.client.Swarm(ctx, r)
}

func (n *fnode) tap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := r.Header.Get(api.PeerNodeHeader)
		from, to, err := parseRange(r.Header.Get("Range"), int64(len(n.e.data)))
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		n.servedMu.Lock()
		busy := n.busyTo == req
		n.servedMu.Unlock()
		if busy {
			if r.URL.RawQuery == "live=1" {
				n.servedMu.Lock()
				n.busyLive[from/n.e.chunk]++
				n.servedMu.Unlock()
			}
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy: ask another holder", http.StatusServiceUnavailable)
			return
		}
		n.e.checkFetch(req, "peer "+n.name, from, to)
		pr := peerReq{server: n.name, node: req, chunk: from / n.e.chunk, at: time.Now(), live: r.URL.RawQuery == "live=1"}
		n.e.mu.Lock()
		n.e.peerLog = append(n.e.peerLog, pr)
		n.e.mu.Unlock()
		tw := &throttled{ResponseWriter: w, rate: n.peerRate, count: func(m int) {
			n.e.mu.Lock()
			n.e.peerBytes[req] += int64(m)
			n.e.mu.Unlock()
		}}
		if n.hang.Load() {
			tw.hold = func(written int64) {
				if written < n.e.chunk/2 {
					return
				}
				// Half a chunk sent: stop sending without closing.
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
				pr.at = time.Now()
				select {
				case n.stuck <- pr:
				default:
				}
				select {
				case <-n.release:
				case <-r.Context().Done():
				}
				tw.hold = nil
			}
		}
		var out http.ResponseWriter = tw
		n.servedMu.Lock()
		if pr.live && n.flipLiveTo == req {
			out = &flipWriter{ResponseWriter: tw}
		}
		n.servedMu.Unlock()
		h.ServeHTTP(out, r)
		if r.Context().Err() == nil {
			n.servedMu.Lock()
			n.servedTo[req]++
			n.servedMu.Unlock()
		}
	})
}

func (n *fnode) busy(to string) {
	n.servedMu.Lock()
	n.busyTo = to
	n.servedMu.Unlock()
}

func (n *fnode) served(to string) int {
	n.servedMu.Lock()
	defer n.servedMu.Unlock()
	return n.servedTo[to]
}

func (n *fnode) fetch(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.done = make(chan error, 1)
	log := logrus.New()
	log.SetOutput(io.Discard)
	if testing.Verbose() {
		log.SetOutput(os.Stderr)
	}
	log2 := log.WithField("node", n.name)
	target := filepath.Join(n.dir, "model.bin")
	// The origin knows the node by the address it connects from.
	origin := &http.Client{Transport: &http.Transport{DisableCompression: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(n.ip)}}).DialContext}}
	n.sw = &swarm{coord: n, codec: n.codec, node: n.name, fabric: "ib-a", source: n.e.o.url, sum: n.e.sum, size: int64(len(n.e.data)),
		chunk: n.e.chunk, target: target, part: target + ".part", origin: origin, peer: n.peer, files: n.files, log: log2, grace: n.grace,
		onBytes: func(from string, b int64) {
			switch from {
			case "origin":
				n.fromOriginCount.Add(b)
			case "peer":
				n.fromPeersCount.Add(b)
			}
		}}
	go func() { n.done <- n.sw.run(ctx) }()
	t.Cleanup(cancel)
}

// kill stops the node as a crash would: no Gone, its chunk server closed
// with its connections, its reads ended.
func (n *fnode) kill() {
	n.killed.Store(true)
	n.srv.Close()
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
	}
}

func (n *fnode) verified() int {
	h := n.files.get(n.e.sum)
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return count(h.have)
}

func (n *fnode) wait(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case err := <-n.done:
		if err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: swarm fetch did not finish within %s (%d chunks verified)", n.name, d, n.verified())
	}
	got, err := os.ReadFile(filepath.Join(n.dir, "model.bin"))
	if err != nil || !bytes.Equal(got, n.e.data) {
		t.Fatalf("%s: the cache file is not the origin's (%v)", n.name, err)
	}
}

// until polls cond every 5 ms for at most d.
func until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// resumedAt is when node first asked a holder other than dead for chunk
// after since, or the zero time.
func (e *fabricEnv) resumedAt(node, dead string, chunk int64, since time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.peerLog {
		if r.node == node && r.server != dead && r.chunk == chunk && r.at.After(since) {
			return r.at
		}
	}
	return time.Time{}
}

// seedFirst starts seed's fetch and, once it holds the lease and reads the
// origin, the others': the fault tests' seed is the first to ask.
func (e *fabricEnv) seedFirst(t *testing.T, seed *fnode, others ...*fnode) {
	t.Helper()
	seed.fetch(t)
	until(t, 5*time.Second, "the seed holds the lease and reads", func() bool { return e.o.sent.Load() > 0 })
	for _, n := range others {
		n.fetch(t)
	}
}

// nextOriginReader waits for the first origin request, after dead, of a
// node other than the seed that died then: the lease's next holder.
func (e *fabricEnv) nextOriginReader(t *testing.T, seed string, dead time.Time) originReq {
	t.Helper()
	var next originReq
	until(t, 10*time.Second, "another node read the origin after the seed died", func() bool {
		for _, r := range e.o.requests() {
			if r.node != seed && r.start.After(dead) {
				next = r
				return true
			}
		}
		return false
	})
	return next
}

func (e *fabricEnv) report(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	v := append([]string(nil), e.violations...)
	var peers []string
	for n, b := range e.peerBytes {
		peers = append(peers, fmt.Sprintf("%s %d", n, b))
	}
	e.mu.Unlock()
	sort.Strings(peers)
	size := int64(len(e.data))
	e.o.mu.Lock()
	var origin []string
	for n, b := range e.o.byNode {
		origin = append(origin, fmt.Sprintf("%s %d", n, b))
	}
	var ranges []string
	for _, r := range e.o.reqs {
		ranges = append(ranges, fmt.Sprintf("%s %d-%d sent %d If-Range %q", r.node, r.from, r.to, r.sent, r.ifRange))
	}
	e.o.mu.Unlock()
	sort.Strings(origin)
	if len(peers) == 0 {
		peers = []string{"(chunk servers not tapped)"}
	}
	t.Logf("origin bytes / file size = %d / %d = %.3f (by node: %s); peer bytes by reader: %s",
		e.o.sent.Load(), size, float64(e.o.sent.Load())/float64(size), strings.Join(origin, ", "), strings.Join(peers, ", "))
	t.Logf("origin requests: %s", strings.Join(ranges, "; "))
	for _, x := range v {
		t.Errorf("a verified chunk fetched again: %s", x)
	}
}

const faultChunk = 256 << 10

// relayFault runs a seed (n41), a relay (n42) and a reader (n43), the seed
// busy for the reader (503, as with maxUploads readers) so that the reader
// reads through the relay. Once n42 has served n43 whole chunks, it stops
// mid-body on its next one to n43, and dies there (closed) or hangs (open,
// silent), and the seed has room again. n43 must ask another holder for
// that chunk within 2 s, and everyone finish with no verified chunk fetched
// twice and one origin copy.
func relayFault(t *testing.T, close bool) {
	e := newFabric(t, 32, faultChunk, 2<<20, 41, 42, 43)
	seed, relay, reader := e.nodes["n41"], e.nodes["n42"], e.nodes["n43"]
	// The relay is slow enough that a chunk from it is in flight a while.
	relay.peerRate = 1 << 20
	seed.busy(reader.name)
	e.seedFirst(t, seed, relay, reader)
	until(t, 20*time.Second, "the relay served the reader a chunk", func() bool { return relay.served(reader.name) > 0 })
	relay.hang.Store(true)
	var stuck peerReq
	for stuck.node != reader.name {
		select {
		case stuck = <-relay.stuck:
		case <-time.After(20 * time.Second):
			t.Fatal("the relay was never mid-body to the reader")
		}
	}
	dead := stuck.at
	seed.busy("")
	if close {
		dead = time.Now()
		relay.kill()
	}
	var resumed time.Time
	until(t, 10*time.Second, fmt.Sprintf("the reader asked another holder for chunk %d", stuck.chunk), func() bool {
		resumed = e.resumedAt(reader.name, relay.name, stuck.chunk, dead)
		return !resumed.IsZero()
	})
	recovery := resumed.Sub(dead)
	how := "hung (open, silent)"
	if close {
		how = "died (closed)"
	}
	t.Logf("relay %s mid-body on chunk %d: the reader asked another holder %v later", how, stuck.chunk, recovery.Round(time.Millisecond))
	if recovery > 2*time.Second {
		t.Errorf("recovery after the relay %s took %v; issue 18 allows 2 s", how, recovery)
	}
	seed.wait(t, 30*time.Second)
	reader.wait(t, 30*time.Second)
	if !close {
		relay.wait(t, 30*time.Second)
	}
	e.report(t)
	if got := e.o.sent.Load(); got != int64(len(e.data)) {
		t.Errorf("the origin served %d bytes of a %d-byte file; the seed never died, so one copy", got, len(e.data))
	}
	if b := reader.fromOriginCount.Load(); b != 0 {
		t.Errorf("the reader read %d bytes from the origin while the seed held the lease", b)
	}
}

func TestSwarmRelayDiesMidBody(t *testing.T)  { relayFault(t, true) }
func TestSwarmRelayHangsMidBody(t *testing.T) { relayFault(t, false) }

// seedDeath: the seed (lease holder) dies half-way; the lease passes to a
// live member, which continues from the origin with If-Range and the
// validator the seed saw, and the rest continue from it. With caughtUp the
// seed dies when the others have every chunk it verified, so that nobody is
// reading from it when it dies.
func seedDeath(t *testing.T, caughtUp bool, k int) {
	e := newFabric(t, 32, faultChunk, 2<<20, k, k+1, k+2)
	seed, n2, n3 := e.nodes[nodeName(k)], e.nodes[nodeName(k+1)], e.nodes[nodeName(k+2)]
	e.seedFirst(t, seed, n2, n3)
	size := int64(len(e.data))
	until(t, 20*time.Second, "the origin served half the file", func() bool { return e.o.sent.Load() >= size/2 })
	if caughtUp {
		until(t, 20*time.Second, "the others caught up with the seed", func() bool {
			v := seed.verified()
			return n2.verified() == v && n3.verified() == v
		})
	}
	dead := time.Now()
	v2, v3 := n2.verified(), n3.verified()
	seed.kill()
	next := e.nextOriginReader(t, seed.name, dead)
	recovery := next.start.Sub(dead)
	t.Logf("seed died with %d/%d bytes from the origin (%s had %d chunks verified, %s %d): %s read the origin %v later, bytes %d-, If-Range %s",
		e.o.sent.Load(), size, n2.name, v2, n3.name, v3, next.node, recovery.Round(time.Millisecond), next.from, next.ifRange)
	if next.ifRange != `"v1"` {
		t.Errorf("the new holder's origin request has If-Range %q, want the validator the seed saw, \"v1\"", next.ifRange)
	}
	if next.from%faultChunk != 0 {
		t.Errorf("the new holder resumed at byte %d, not at a chunk boundary", next.from)
	}
	if recovery > 2*time.Second {
		t.Errorf("recovery after the seed died took %v; issue 18 allows 2 s", recovery)
	}
	n2.wait(t, 30*time.Second)
	n3.wait(t, 30*time.Second)
	e.report(t)
	// No origin byte a survivor had: at most what the seed read and took
	// with it (its chunks nobody had yet and the chunk it was reading).
	if got := e.o.sent.Load(); got > size+size/2 {
		t.Errorf("the origin served %d bytes for a %d-byte file", got, size)
	}
	e.o.mu.Lock()
	defer e.o.mu.Unlock()
	if e.o.maxActive > 1 {
		t.Errorf("%d origin reads at once; the lease allows one", e.o.maxActive)
	}
}

func TestSwarmSeedDies(t *testing.T)         { seedDeath(t, false, 51) }
func TestSwarmSeedDiesCaughtUp(t *testing.T) { seedDeath(t, true, 54) }

// TestSwarmNoPeerReachableFallsBackWithinLease: a node whose fabric link is
// down (it reaches no peer) reads the origin only once the lease passes to
// it, never while the seed holds it and reads.
func TestSwarmNoPeerReachableFallsBackWithinLease(t *testing.T) {
	e := newFabric(t, 16, faultChunk, 2<<20, 61, 62, 63)
	seed, cut := e.nodes["n61"], e.nodes["n63"]
	cut.peer = &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("fabric link down")
	}}}
	e.seedFirst(t, seed, e.nodes["n62"], cut)
	seed.wait(t, 30*time.Second)
	e.nodes["n62"].wait(t, 30*time.Second)
	cut.wait(t, 60*time.Second)
	e.report(t)
	size := int64(len(e.data))
	var seedEnd, cutStart time.Time
	for _, r := range e.o.requests() {
		switch r.node {
		case seed.name:
			if r.end.After(seedEnd) {
				seedEnd = r.end
			}
		case cut.name:
			if cutStart.IsZero() {
				cutStart = r.start
			}
		default:
			t.Errorf("%s read the origin; it reaches its peers", r.node)
		}
	}
	if cutStart.Before(seedEnd) {
		t.Errorf("the cut-off node read the origin at %v, before the seed's origin read ended at %v", cutStart, seedEnd)
	}
	if got := cut.fromOriginCount.Load(); got != size {
		t.Errorf("the cut-off node read %d bytes from the origin for a %d-byte file", got, size)
	}
	t.Logf("the cut-off node took the lease %v after the seed's last origin byte", cutStart.Sub(seedEnd).Round(time.Millisecond))
	e.o.mu.Lock()
	defer e.o.mu.Unlock()
	if e.o.maxActive > 1 {
		t.Errorf("%d origin reads at once; the lease allows one", e.o.maxActive)
	}
}

// TestSwarmHolderReadsPeersFirst: the lease passes to a member that a
// complete peer is still feeding (the seed finished and went quiet, its
// uploads slow); the new holder keeps reading what the peer holds from the
// peer, and the origin serves the file once. The uploads are slow but above
// a peer read's floor (peerFloorRate): about 11 s for the file, so that the
// lease passes (5 s after the seed's last report) while the peer feeds it.
func TestSwarmHolderReadsPeersFirst(t *testing.T) {
	e := newFabric(t, 160, faultChunk, 16<<20, 71, 72)
	seed, slow := e.nodes["n71"], e.nodes["n72"]
	seed.peerRate = peerFloorRate * 5 / 4
	e.seedFirst(t, seed, slow)
	seed.wait(t, 30*time.Second)
	slow.wait(t, 60*time.Second)
	e.report(t)
	if got := e.o.sent.Load(); got != int64(len(e.data)) {
		t.Errorf("the origin served %d bytes of a %d-byte file; a complete peer held every chunk", got, len(e.data))
	}
}

// TestSwarmHolderStuckOnOriginLosesLease: the origin stops sending to the
// seed half-way without closing; the seed keeps reporting, reads nothing,
// and must lose the lease after the lease timeout (5 s) to a member that
// continues from the origin with If-Range. Without the coordinator's
// progress rule the fabric waits on the seed forever.
func TestSwarmHolderStuckOnOriginLosesLease(t *testing.T) {
	e := newFabric(t, 16, faultChunk, 4<<20, 75, 76)
	seed, other := e.nodes["n75"], e.nodes["n76"]
	e.o.stall, e.o.stallAt, e.o.stalled = seed.name, int64(len(e.data))/2, make(chan struct{})
	e.seedFirst(t, seed, other)
	select {
	case <-e.o.stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("the origin never stalled the seed")
	}
	stuck := time.Now()
	var next originReq
	until(t, 15*time.Second, "another node read the origin after the seed's read stalled", func() bool {
		for _, r := range e.o.requests() {
			if r.node == other.name {
				next = r
				return true
			}
		}
		return false
	})
	t.Logf("origin stalled the seed; %s took over %v later, bytes %d-, If-Range %s", next.node, next.start.Sub(stuck).Round(time.Millisecond), next.from, next.ifRange)
	if next.ifRange != `"v1"` {
		t.Errorf("the new holder's origin request has If-Range %q, want the seed's validator \"v1\"", next.ifRange)
	}
	seed.wait(t, 30*time.Second)
	other.wait(t, 30*time.Second)
	e.report(t)
}

// TestSwarmSlowOriginKeepsLease: a holder whose origin is slow but moving
// keeps the lease even when one chunk takes longer than the lease timeout
// (5 s) to arrive, as a 16 MiB chunk does over a fabric's share of an
// 80 Mbit/s uplink: the coordinator sees its origin bytes grow within the
// chunk, and no other node of the fabric reads the origin.
func TestSwarmSlowOriginKeepsLease(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s")
	}
	// Two chunks at 7 s each: the first report after the seed's request
	// and the next one 5 s on see no whole chunk yet.
	e := newFabric(t, 2, faultChunk, faultChunk/7, 81, 82)
	seed, other := e.nodes["n81"], e.nodes["n82"]
	e.seedFirst(t, seed, other)
	seed.wait(t, 40*time.Second)
	other.wait(t, 40*time.Second)
	for _, r := range e.o.requests() {
		if r.node != seed.name {
			t.Errorf("%s read the origin (bytes %d-%d) while %s held the lease and its read was moving", r.node, r.from, r.to, seed.name)
		}
	}
	t.Logf("origin sent %.3f copies of a %d-byte file at %d bytes/s", float64(e.o.sent.Load())/float64(len(e.data)), len(e.data), faultChunk/7)
	e.report(t)
}
