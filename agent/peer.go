package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
)

// maxUploads bounds the chunk requests a node serves at once: eight 16 MiB
// chunks in flight fill a fabric link, and more would only slow each down
// while the node's own fetch competes for the disk. Beyond it a peer is told
// 503 and moves to another holder.
const maxUploads = 8

// maxUploadsPerNode bounds the verified reads one node is served at once:
// a member reads peerParallel chunks at a time, and one node reading slowly
// (or a root on it that means to) must leave the other slots to the rest
// of the fabric. One live stream per node, which is all a member asks for.
const maxUploadsPerNode = peerParallel

// serveStall is how long one write of an answer may block: a reader that
// takes nothing for that long while the server has bytes for it is cut
// off, its slot freed. Twice the reader's own peerStall, so that an honest
// reader gives up first.
const serveStall = 2 * peerStall

// maxServedChunk is the largest chunk a request may cover: the largest
// chunk size a swarm may have (the coordinator's SwarmMaxChunk, which
// TestMaxServedChunk holds equal to it).
const maxServedChunk = 64 << 20

// maxLiveUploads bounds the live streams (serveLive) a node serves at once,
// apart from maxUploads: a live stream lasts as long as the origin takes to
// deliver the chunk (about 5 s in scripts/bench/fanout.sh), and in a fabric
// of more than a few nodes the members caught up with the holder would
// otherwise take every slot, leaving verified reads from the holder 503.
// Beyond it a member reads the chunk once it is verified.
const maxLiveUploads = maxUploads / 2

// resolvePeerAddr is the node's chunk server address from peer_addr, or
// peer_interface's first IPv4 (else IPv6) address and peer_port; "" when
// neither is set.
func resolvePeerAddr(cfg Config) (string, error) {
	if cfg.PeerAddr != "" {
		return cfg.PeerAddr, nil
	}
	if cfg.PeerInterface == "" {
		return "", nil
	}
	port := cfg.PeerPort
	if port == 0 {
		port = DefaultPeerPort
	}
	ifi, err := net.InterfaceByName(cfg.PeerInterface)
	if err != nil {
		return "", fmt.Errorf("peer_interface %q: %w; name the fabric's interface as 'ip link' shows it, or set peer_addr", cfg.PeerInterface, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return "", fmt.Errorf("peer_interface %q: %w", cfg.PeerInterface, err)
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if ipn.IP.To4() != nil {
			return net.JoinHostPort(ipn.IP.String(), strconv.Itoa(port)), nil
		}
		if v6 == nil {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return net.JoinHostPort(v6.String(), strconv.Itoa(port)), nil
	}
	return "", fmt.Errorf("peer_interface %q has no usable address; bring it up or set peer_addr", cfg.PeerInterface)
}

// peerServer answers GET /v1/chunks/{sha256} from the node's fabric.
type peerServer struct {
	addr     string // this server's own address, which a request's Host must be
	fabric   string
	codec    munge.Codec
	uid      uint32 // the agent's own uid, accepted besides 0
	cacheDir string
	files    *holdings
	slots    chan struct{}
	// liveSlots are the live streams', apart from the verified reads'.
	liveSlots chan struct{}
	// onServed, when set, is given the bytes each answer sent: the
	// agent's llmgw_agent_swarm_served_bytes_total, which shows which
	// node fed its fabric, and that a node of another fabric fed none.
	onServed func(n int64)
	// onDropped, when set, is told of a complete file dropped because it
	// is gone or changed, so that its swarm stops offering it.
	onDropped func(sum string, h *held)

	mu     sync.Mutex
	byNode map[string]int // slots in use, by requesting node and kind
}

func newPeerServer(addr, fabric string, codec munge.Codec, cacheDir string, files *holdings) *peerServer {
	return &peerServer{addr: addr, fabric: fabric, codec: codec, uid: uint32(os.Geteuid()), cacheDir: cacheDir, files: files,
		slots: make(chan struct{}, maxUploads), liveSlots: make(chan struct{}, maxLiveUploads), byNode: map[string]int{}}
}

// take takes a slot for one answer to node, within the node's share and
// the server's; it returns the release, or nil when either is full.
func (s *peerServer) take(node string, live bool) func() {
	slots, key, most := s.slots, node, maxUploadsPerNode
	if live {
		slots, key, most = s.liveSlots, node+"\x00live", 1
	}
	s.mu.Lock()
	if s.byNode[key] >= most {
		s.mu.Unlock()
		return nil
	}
	s.byNode[key]++
	s.mu.Unlock()
	untake := func() {
		s.mu.Lock()
		if s.byNode[key]--; s.byNode[key] <= 0 {
			delete(s.byNode, key)
		}
		s.mu.Unlock()
	}
	select {
	case slots <- struct{}{}:
		return func() {
			<-slots
			untake()
		}
	default:
		untake()
		return nil
	}
}

// busy answers 503 with Retry-After, which tells a member this is the
// honest "busy", which it leaves alone briefly, from a refusal, which it
// reports.
func busy(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, why, http.StatusServiceUnavailable)
}

// oneChunk says whether from..to is exactly one chunk of h. A request
// covers one chunk, so that an answer's cost (its slot's time, its write
// deadline) is bounded by a chunk, not the file: 8 readers of the whole
// file at 100 B/s held all 8 slots of a holder (issue 24). A complete file
// held by a Fetcher's fetch does not know the swarm's chunk size: there,
// a range of at most maxServedChunk on a boundary of its own length, or
// the file's tail.
func (h *held) oneChunk(from, to int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := to - from + 1
	if h.complete && !h.chunked {
		return n <= maxServedChunk && (from%n == 0 || to == h.size-1)
	}
	return from%h.chunkSize == 0 && to == min(from+h.chunkSize, h.size)-1
}

func (s *peerServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sum, ok := strings.CutPrefix(r.URL.Path, "/"+api.Version+"/chunks/")
	live := r.URL.RawQuery == "live=1"
	if r.Method != http.MethodGet || !ok || !catalog.ValidSHA256(sum) || (r.URL.RawQuery != "" && !live) {
		http.Error(w, "only GET /v1/chunks/{sha256}[?live=1] is served here", http.StatusNotFound)
		return
	}
	if err := s.authenticate(r); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	release := s.take(r.Header.Get(api.PeerNodeHeader), live)
	if release == nil {
		busy(w, "busy: ask another holder")
		return
	}
	defer release()
	h := s.files.get(sum)
	if h == nil {
		http.Error(w, "not held here", http.StatusNotFound)
		return
	}
	from, to, err := parseRange(r.Header.Get("Range"), h.size)
	if err == nil && !h.oneChunk(from, to) {
		err = fmt.Errorf("range %s: a request covers exactly one chunk", r.Header.Get("Range"))
	}
	if err != nil {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", h.size))
		http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	if live {
		s.serveLive(w, r, h, from, to)
		return
	}
	if !h.verified(from, to) {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", h.size))
		http.Error(w, "a chunk of the range is not verified here yet", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	fh, err := h.open(sum)
	switch {
	case errors.Is(err, errMoving):
		busy(w, err.Error())
		return
	case err != nil:
		// Gone (gc) or replaced: never served under this digest again,
		// and its swarm is told.
		s.files.drop(sum, h)
		if s.onDropped != nil && h.isComplete() {
			// A fetch in progress tells its swarm itself, when it ends.
			s.onDropped(sum, h)
		}
		http.Error(w, "not held here any more", http.StatusNotFound)
		return
	}
	defer fh.Close()
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, h.size))
	w.Header().Set("Content-Length", strconv.FormatInt(to-from+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	n, _ := copyPaced(w, io.NewSectionReader(fh, from, to-from+1), to-from+1)
	if s.onServed != nil {
		s.onServed(n)
	}
}

// copyPaced writes n bytes of r to w under write deadlines: each piece
// within serveStall, and the whole within serveStall and n at
// peerFloorRate (a reader's own limit, plus a margin). Without them a
// reader that takes nothing holds its upload slot for as long as it keeps
// the connection open. The deadline is cleared at the end, for the next
// request on the connection.
func copyPaced(w http.ResponseWriter, r io.Reader, n int64) (int64, error) {
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	end := time.Now().Add(serveStall + time.Duration(float64(n)/peerFloorRate*float64(time.Second)))
	buf := make([]byte, 256<<10)
	var sent int64
	for {
		m, rerr := r.Read(buf)
		if m > 0 {
			d := time.Now().Add(serveStall)
			if end.Before(d) {
				d = end
			}
			rc.SetWriteDeadline(d)
			k, err := w.Write(buf[:m])
			sent += int64(k)
			if err != nil {
				return sent, err
			}
		}
		if rerr == io.EOF {
			return sent, nil
		}
		if rerr != nil {
			return sent, rerr
		}
	}
}

// serveLive streams the chunk this node is reading from the origin, from
// its buffer as the origin fills it, to a reader that verifies it against
// the digest the coordinator publishes once the chunk is whole. Only the
// chunk of h.live, which only the lease holder's origin read sets: a relay
// has no live chunk, so it never passes on bytes nobody verified. The body
// is cut short (the connection closed, Content-Length unmet) when the
// origin read breaks, so that the reader discards what it has.
func (s *peerServer) serveLive(w http.ResponseWriter, r *http.Request, h *held, from, to int64) {
	h.mu.Lock()
	c := h.live
	h.mu.Unlock()
	if c == nil || from != c.from || to != c.from+int64(len(c.buf))-1 {
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", h.size))
		http.Error(w, "not reading that chunk from the origin; ask for it once it is verified", http.StatusRequestedRangeNotSatisfiable)
		return
	}
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, h.size))
	w.Header().Set("Content-Length", strconv.Itoa(len(c.buf)))
	w.WriteHeader(http.StatusPartialContent)
	rc := http.NewResponseController(w)
	sent := 0
	defer func() {
		if s.onServed != nil {
			s.onServed(int64(sent))
		}
	}()
	// Each write within serveStall: the bytes come at the origin's pace,
	// but a reader that stops taking them must not keep a live slot.
	defer rc.SetWriteDeadline(time.Time{})
	for sent < len(c.buf) {
		n, broken, wake := c.state()
		if n > sent {
			rc.SetWriteDeadline(time.Now().Add(serveStall))
			m, err := w.Write(c.buf[sent:n])
			sent += m
			if err != nil {
				return
			}
			// Each piece goes out as it came: the reader is to have the
			// chunk when the origin's last byte of it arrives here.
			rc.Flush()
			continue
		}
		if broken {
			return
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}

// authenticate accepts a request only with a MUNGE credential made by root
// (or the agent's own user) on a cluster host, for exactly this request to
// exactly this server, from a node that says it is of this fabric and that
// the coordinator's plan of the file's swarm lists as a member, from one of
// that member's addresses (issue 24): the fabric header is the requester's
// word, and a node of another fabric once read this fabric's chunks with
// it.
func (s *peerServer) authenticate(r *http.Request) error {
	if r.Host != s.addr {
		return fmt.Errorf("request for %q, this is %s", r.Host, s.addr)
	}
	fabric := r.Header.Get(api.PeerFabricHeader)
	if fabric != s.fabric {
		return fmt.Errorf("fabric %q: this node serves fabric %s only", fabric, s.fabric)
	}
	cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), api.MungeScheme+" ")
	if !ok || cred == "" {
		return errors.New("a MUNGE credential is required")
	}
	c, err := s.codec.Decode(r.Context(), cred)
	if err != nil {
		return fmt.Errorf("credential refused: %v", err)
	}
	if c.UID != 0 && c.UID != s.uid {
		return fmt.Errorf("credential of uid %d: only the agents (root) may read chunks", c.UID)
	}
	node := r.Header.Get(api.PeerNodeHeader)
	want := api.PeerMungePayload(r.Method, r.Host, r.URL.RequestURI(), node, fabric, r.Header.Get("Range"))
	if string(c.Payload) != string(want) {
		return errors.New("the credential was made for another request")
	}
	sum, _ := strings.CutPrefix(r.URL.Path, "/"+api.Version+"/chunks/")
	if h := s.files.get(sum); h != nil && !h.admit(r.Context(), node, c.Addr) {
		return fmt.Errorf("node %q with a credential from %s is no member of this file's swarm in fabric %s as the coordinator lists them (node and address)", node, c.Addr, s.fabric)
	}
	return nil
}

// parseRange takes one "bytes=A-B" range within size.
func parseRange(h string, size int64) (from, to int64, err error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	a, b, ok2 := strings.Cut(spec, "-")
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("range %q: want one bytes=A-B", h)
	}
	from, err1 := strconv.ParseInt(a, 10, 64)
	to, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || from < 0 || to < from || to >= size {
		return 0, 0, fmt.Errorf("range %q: want one bytes=A-B within %d bytes", h, size)
	}
	return from, to, nil
}

// peerGet asks a peer for bytes from..to of the file sum, with a credential
// for exactly this request; live asks the lease holder for the chunk it is
// reading from the origin (api/swarm.go).
func peerGet(ctx context.Context, hc *http.Client, codec munge.Codec, node, fabric, addr, sum string, from, to int64, live bool) (*http.Response, error) {
	uri := "/" + api.Version + "/chunks/" + sum
	if live {
		uri += "?live=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+uri, nil)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-%d", from, to)
	req.Header.Set("Range", rng)
	req.Header.Set(api.PeerNodeHeader, node)
	req.Header.Set(api.PeerFabricHeader, fabric)
	cred, err := codec.Encode(ctx, api.PeerMungePayload(http.MethodGet, addr, uri, node, fabric, rng))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", api.MungeScheme+" "+cred)
	return hc.Do(req)
}
