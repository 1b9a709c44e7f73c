package munge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/api"
)

// Wire decodes credentials by speaking munged's own client protocol on its
// socket, from Go: what libmunge does, without cgo. It exists for the
// coordinator, which decodes a credential per report: a cgo call keeps its
// goroutine's P for as long as munged takes to answer, so on two cores two
// decodes waiting for munged left nothing to run the rest of the ingest
// (BenchmarkCoordinatorMunge: 1.2 of the 2 Ps sat in munge_decode, and
// ingest ran at half the CPU it had). Here the wait is on the network
// poller, and the P runs other requests meanwhile.
//
// Encode goes through Enc (libmunge or the programs, as New picks): the
// agent encodes one credential per report, and nothing waits behind it. A
// decode never does: see Decode.
type Wire struct {
	Path string
	Enc  Codec
	// Timeout bounds one decode, the wait for a turn (MaxInFlight)
	// included, when ctx has no earlier deadline; libmunge's is 2 s. Zero
	// means wireTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the decodes talking to munged at once (zero:
	// DefaultMaxInFlight); the rest wait their turn here. Through libmunge
	// a decode held a P, which bounded them by accident; without a bound a
	// burst of reports (every agent after a coordinator restart) would
	// overflow munged's listen backlog of 256, and its refusals would fail
	// slurmctld's and slurmd's credentials on the same host along with the
	// reports.
	MaxInFlight int

	slotsOnce sync.Once
	slots     chan struct{}
}

// DefaultMaxInFlight is Wire's bound on concurrent decodes: munged decodes
// on two threads by default, and a few requests queued behind each keep
// them busy.
const DefaultMaxInFlight = 32

// The protocol (munge 0.5's m_msg, version 4): every message is an 11-byte
// header, then a body. Integers are big-endian.
//
//	header:   magic u32, version u8, type u8, retry u8, body length u32
//	decode request body:  length u32, the credential with its NUL
//	decode response body: status u8, error length u8, error (with NUL),
//	  cipher u8, mac u8, zip u8, realm length u8, realm, ttl u32,
//	  address length u8, address (an in_addr), encode time u32,
//	  decode time u32, uid u32, gid u32, auth uid u32, auth gid u32,
//	  payload length u32, payload
const (
	wireMagic   = 0x00606D4B
	wireVersion = 4
	wireDecReq  = 4
	wireDecRsp  = 5
	wireHdrSize = 11
	wireTimeout = 2 * time.Second
	// wireDialAttempts and wireDialBackoff: a refused connect is tried
	// again after 10, 20, 30 and 40 ms (libmunge: 10 tries from 50 ms).
	wireDialAttempts = 5
	wireDialBackoff  = 10 * time.Millisecond
	// maxWireCred bounds the credential sent: munged's own request limit
	// is larger, but a credential over this is no report's.
	maxWireCred = 1 << 20
	// maxWireRsp bounds what is read back: the payload munged returns is
	// at most the credential's size.
	maxWireRsp = maxWireCred + 4096
	// statusBadArg is munged's EMUNGE_BAD_ARG, for a credential refused
	// here before asking munged.
	statusBadArg = 2
)

func (w *Wire) Socket() string { return w.Path }

// Encode makes a credential through w.Enc.
func (w *Wire) Encode(ctx context.Context, payload []byte) (string, error) {
	if w.Enc == nil {
		return "", &Error{Op: "encode", Status: StatusSocket, Msg: "no encoder configured (socket " + w.Path + ")"}
	}
	return w.Enc.Encode(ctx, payload)
}

// Decode asks munged to decode cred. It is sent once, with retry 0, and
// never again: munged's replay check treats a request marked as a retry
// leniently (the first try may have been decoded and its answer lost), and
// a credential must be judged by the strict check.
func (w *Wire) Decode(ctx context.Context, cred string) (Cred, error) {
	if cred == "" {
		return Cred{}, &Error{Op: "decode", Status: statusBadArg, Msg: "no credential given"}
	}
	if len(cred) > maxWireCred {
		return Cred{}, &Error{Op: "decode", Status: statusBadArg, Msg: fmt.Sprintf("the credential is %d bytes; the limit is %d", len(cred), maxWireCred)}
	}
	if strings.IndexByte(cred, 0) >= 0 {
		// libmunge sends the credential as a C string: it would end at
		// the NUL, and munged would judge a prefix.
		return Cred{}, &Error{Op: "decode", Status: statusBadArg, Msg: "the credential contains a NUL byte"}
	}
	fail := func(format string, args ...any) (Cred, error) {
		return Cred{}, &Error{Op: "decode", Status: StatusSocket, Msg: fmt.Sprintf(format, args...) + " (socket " + w.Path + ")"}
	}
	// One deadline for the whole decode, the wait for a turn included:
	// a report's handler has no deadline of its own, and while munged
	// hangs the handlers queued behind the slots would otherwise wait
	// on, then spend credentials whose senders have long given up. It is
	// a time, not a context of its own: a decode per report made
	// context.WithTimeout's timer a few per cent of a report's cost.
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = wireTimeout
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	w.slotsOnce.Do(func() {
		n := w.MaxInFlight
		if n <= 0 {
			n = DefaultMaxInFlight
		}
		w.slots = make(chan struct{}, n)
	})
	select {
	case w.slots <- struct{}{}:
	default:
		// No turn free: wait for one, as long as the deadline allows.
		t := time.NewTimer(time.Until(deadline))
		select {
		case w.slots <- struct{}{}:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return fail("waiting for a turn to ask munged: %v", ctx.Err())
		case <-t.C:
			return fail("waiting for a turn to ask munged: %v", context.DeadlineExceeded)
		}
	}
	defer func() { <-w.slots }()
	c, err := w.dial(ctx, deadline)
	if err != nil {
		return fail("cannot reach munged: %v; is munged running?", err)
	}
	defer c.Close()
	if err := checkServer(c); err != nil {
		return fail("%v", err)
	}
	c.SetDeadline(deadline)
	// A cancelled ctx ends the exchange now rather than at the deadline.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	body := len(cred) + 1
	msg := make([]byte, wireHdrSize+4+body)
	binary.BigEndian.PutUint32(msg[0:], wireMagic)
	msg[4] = wireVersion
	msg[5] = wireDecReq
	msg[6] = 0 // retry
	binary.BigEndian.PutUint32(msg[7:], uint32(4+body))
	binary.BigEndian.PutUint32(msg[11:], uint32(body))
	copy(msg[15:], cred) // the NUL is msg's last byte, already 0
	if _, err := c.Write(msg); err != nil {
		return fail("sending the credential to munged: %v", err)
	}

	// The answer is read into the request's buffer, which is larger than
	// any answer to it (munged's answer carries the payload, shorter than
	// the credential, and fixed fields), so header and body usually come
	// in one read.
	buf := msg[:cap(msg)]
	got, err := io.ReadAtLeast(c, buf, wireHdrSize)
	if err != nil {
		return fail("reading munged's answer: %v", err)
	}
	hdr := buf[:wireHdrSize]
	if m := binary.BigEndian.Uint32(hdr[0:]); m != wireMagic {
		return fail("munged answered with magic %#x, not %#x: is this munged's socket?", m, wireMagic)
	}
	if hdr[4] != wireVersion {
		// Refused, never asked again through libmunge: a munged that
		// answered has read the request and may have decoded (and
		// cached) the credential, and libmunge marks its own retries,
		// which munged's replay check lets through. A real munged never
		// answers a version it cannot read (it closes the connection),
		// so this is something else on the socket, or a munged of a
		// later format that this llmgw must learn first.
		return fail("munged answered in message version %d; this llmgw speaks %d (munge 0.5): check what listens on the socket, or upgrade llmgw", hdr[4], wireVersion)
	}
	if hdr[5] != wireDecRsp {
		return fail("munged answered with message type %d, not a decode answer (%d)", hdr[5], wireDecRsp)
	}
	n := binary.BigEndian.Uint32(hdr[7:])
	if n > maxWireRsp {
		return fail("munged's answer is %d bytes; the limit is %d", n, maxWireRsp)
	}
	// Anything past the answer its header announces is not read, as
	// before: munged sends one answer and closes.
	total := wireHdrSize + int(n)
	if total > len(buf) {
		buf = append(buf[:got], make([]byte, total-got)...)
	}
	buf = buf[:total]
	if _, err := io.ReadFull(c, buf[min(got, total):]); err != nil {
		return fail("reading munged's answer: %v", err)
	}
	rsp := buf[wireHdrSize:]
	out, status, msgText, ok := parseDecodeAnswer(rsp)
	if !ok {
		return fail("munged's decode answer of %d bytes does not parse", n)
	}
	if status != 0 {
		if msgText == "" {
			msgText = "munged refused the credential"
		}
		return Cred{}, &Error{Op: "decode", Status: int(status), Msg: msgText + " (socket " + w.Path + ")"}
	}
	return out, nil
}

// dial connects to munged, trying again as libmunge does when the socket
// refuses for now (a full backlog, or munged restarting): nothing has been
// sent yet, so a second try cannot count as a replay.
func (w *Wire) dial(ctx context.Context, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	for i := 1; ; i++ {
		c, err := d.DialContext(ctx, "unix", w.Path)
		if err == nil || i == wireDialAttempts || !(errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ECONNREFUSED)) {
			return c, err
		}
		t := time.NewTimer(time.Duration(i) * wireDialBackoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// checkServer refuses a socket served by anyone but root, the munge user or
// this process's own user. Whatever answers here decides who every report
// and peer request comes from, and a socket path can be squatted (a
// directory others may write to, a munged that is down and a user's
// listener in its place) or mistyped; libmunge does not ask. The kernel
// says who called listen() on the other end (api.PeerUID, as the hooks ask
// of the agent's socket); munged drops root for the munge user before it
// listens, and a munged this process started itself is as trusted as it is.
func checkServer(c net.Conn) error {
	uid, err := api.PeerUID(c)
	if err != nil {
		return fmt.Errorf("cannot tell who serves the socket: %v", err)
	}
	if uid == 0 || int(uid) == os.Geteuid() {
		return nil
	}
	if m, ok := mungeUID(); ok && uid == m {
		return nil
	}
	return fmt.Errorf("the process serving it runs as uid %d, which is neither root, the munge user nor this process's user: not munged's socket, or one squatted; name munged's own socket (normally %s)", uid, DefaultSocket)
}

// mungeUID is the munge user's uid, looked up once, on first use: the
// hooks never decode, and pay nothing for it.
var mungeUID = sync.OnceValues(func() (uint32, bool) {
	u, err := user.Lookup("munge")
	if err != nil {
		return 0, false
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(uid), err == nil
})

// parseDecodeAnswer reads a decode answer's body; ok is false when it is
// short, long, or has an address that is neither absent nor IPv4.
func parseDecodeAnswer(b []byte) (c Cred, status uint8, msg string, ok bool) {
	p := wireReader{b: b}
	status = p.u8()
	msg = cString(p.bytes(int(p.u8())))
	p.skip(3) // cipher, mac, zip
	p.skip(int(p.u8()))
	p.skip(4) // ttl
	switch n := int(p.u8()); n {
	case 0:
		c.Addr = netip.IPv4Unspecified()
	case 4:
		if a := p.bytes(4); a != nil {
			c.Addr = netip.AddrFrom4([4]byte(a))
		}
	default:
		return Cred{}, 0, "", false
	}
	p.skip(8) // encode and decode times
	c.UID = p.u32()
	c.GID = p.u32()
	p.skip(8) // auth uid and gid
	if n := int(p.u32()); n > 0 {
		c.Payload = append([]byte(nil), p.bytes(n)...)
	}
	if p.bad || len(p.b) != 0 {
		return Cred{}, 0, "", false
	}
	return c, status, msg, true
}

// wireReader takes fields off the front of b; reading past its end sets bad
// and returns zeros.
type wireReader struct {
	b   []byte
	bad bool
}

func (r *wireReader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *wireReader) skip(n int) { r.bytes(n) }

func (r *wireReader) u8() uint8 {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *wireReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
