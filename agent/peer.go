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

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/munge"
	"github.com/llmgw/llmgw/weights/catalog"
)

// maxUploads bounds the chunk requests a node serves at once: eight 16 MiB
// chunks in flight fill a fabric link, and more would only slow each down
// while the node's own fetch competes for the disk. Beyond it a peer is told
// 503 and moves to another holder.
const maxUploads = 8

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
}

func newPeerServer(addr, fabric string, codec munge.Codec, cacheDir string, files *holdings) *peerServer {
	return &peerServer{addr: addr, fabric: fabric, codec: codec, uid: uint32(os.Geteuid()), cacheDir: cacheDir, files: files,
		slots: make(chan struct{}, maxUploads), liveSlots: make(chan struct{}, maxLiveUploads)}
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
	slots := s.slots
	if live {
		slots = s.liveSlots
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		// Retry-After tells a member this is the honest "busy", which it
		// leaves alone briefly, from a refusal, which it reports.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy: ask another holder", http.StatusServiceUnavailable)
		return
	}
	h := s.files.get(sum)
	if h == nil {
		http.Error(w, "not held here", http.StatusNotFound)
		return
	}
	from, to, err := parseRange(r.Header.Get("Range"), h.size)
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
	h.mu.Lock()
	path := h.path
	h.mu.Unlock()
	fh, err := os.Open(path)
	if err != nil {
		// The .part was renamed between the lookup and the open: ask again.
		http.Error(w, "moved; ask again", http.StatusServiceUnavailable)
		return
	}
	defer fh.Close()
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, h.size))
	w.Header().Set("Content-Length", strconv.FormatInt(to-from+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	n, _ := io.Copy(w, io.NewSectionReader(fh, from, to-from+1))
	if s.onServed != nil {
		s.onServed(n)
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
	for sent < len(c.buf) {
		n, broken, wake := c.state()
		if n > sent {
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
// exactly this server, from a node that says it is of this fabric.
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
	want := api.PeerMungePayload(r.Method, r.Host, r.URL.RequestURI(), r.Header.Get(api.PeerNodeHeader), fabric, r.Header.Get("Range"))
	if string(c.Payload) != string(want) {
		return errors.New("the credential was made for another request")
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
