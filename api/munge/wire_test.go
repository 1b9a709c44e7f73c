package munge_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api/munge"
)

// silentMunged listens on a socket in dir, reads what each connection
// sends and then answers with answer (nothing when nil), cut between
// writes at the offsets in pieces, and keeps the connection open until
// the test ends.
func silentMunged(t *testing.T, answer []byte, pieces ...int) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "munge.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveAnswer(t, l, answer, pieces...)
	return sock
}

// serveAnswer is silentMunged's server on a listener of the caller's.
func serveAnswer(t *testing.T, l net.Listener, answer []byte, pieces ...int) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				buf := make([]byte, 4096)
				c.Read(buf)
				if answer == nil {
					return
				}
				from := 0
				for _, to := range append(pieces, len(answer)) {
					c.Write(answer[from:to])
					from = to
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
	}()
}

// A decode waits for munged on the network poller, so it ends when its
// context does, and at Timeout without one: a munged that accepted and
// hangs does not hold a report's handler (libmunge waits out its own 2 s).
func TestWireDecodeEndsWithContextAndTimeout(t *testing.T) {
	sock := silentMunged(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	w := &munge.Wire{Path: sock, Timeout: time.Minute}
	start := time.Now()
	_, err := w.Decode(ctx, "MUNGE:AAAA:")
	if err == nil || time.Since(start) > 20*time.Second {
		t.Fatalf("decode against a silent munged, cancelled after 50 ms: %v after %v, want an error soon after the cancel", err, time.Since(start))
	}
	w.Timeout = 100 * time.Millisecond
	start = time.Now()
	_, err = w.Decode(context.Background(), "MUNGE:AAAA:")
	var me *munge.Error
	if !errors.As(err, &me) || me.Status != munge.StatusSocket || !strings.Contains(err.Error(), sock) || time.Since(start) > 20*time.Second {
		t.Fatalf("decode against a silent munged with a 100 ms timeout: %v after %v, want a socket error naming %s", err, time.Since(start), sock)
	}
}

// Something on the socket that does not speak munged's protocol is an
// error naming the socket, never a credential.
func TestWireDecodeRefusesAnswerThatIsNotMunged(t *testing.T) {
	for name, answer := range map[string][]byte{
		"http":        []byte("HTTP/1.1 400 Bad Request\r\n\r\n"),
		"short":       {0x00, 0x60, 0x6d, 0x4b, 4, 5, 0, 0, 0, 0, 9, 0, 0},
		"huge length": {0x00, 0x60, 0x6d, 0x4b, 4, 5, 0, 0xff, 0xff, 0xff, 0xff},
		"old version": {0x00, 0x60, 0x6d, 0x4b, 3, 5, 0, 0, 0, 0, 0},
	} {
		sock := silentMunged(t, answer)
		c, err := (&munge.Wire{Path: sock, Timeout: time.Second}).Decode(context.Background(), "MUNGE:AAAA:")
		if err == nil || !strings.Contains(err.Error(), sock) {
			t.Errorf("%s: decoded %+v, %v; want an error naming %s", name, c, err, sock)
		}
	}
}

// libmunge sends a credential as a C string, so a NUL would end it early
// and munged would judge a prefix; it is refused before munged is asked.
func TestWireDecodeRefusesNUL(t *testing.T) {
	sock := silentMunged(t, nil)
	_, err := (&munge.Wire{Path: sock, Timeout: time.Second}).Decode(context.Background(), "MUNGE:AAAA:\x00tail")
	if err == nil || !strings.Contains(err.Error(), "contains a NUL byte") {
		t.Fatalf("decoding a credential with a NUL: %v, want a refusal naming the NUL", err)
	}
}

// decodeAnswer is munged's answer to a decode that succeeded: uid 0 from
// 127.0.0.9 with payload, in the message format of munge 0.5.
func decodeAnswer(payload []byte) []byte {
	var body []byte
	body = append(body, 0, 0)       // status, no error text
	body = append(body, 4, 3, 0, 0) // cipher, mac, zip, no realm
	body = binary.BigEndian.AppendUint32(body, 300)
	body = append(body, 4, 127, 0, 0, 9)
	for _, v := range []uint32{1, 2, 0, 0, 0xffffffff, 0xffffffff, uint32(len(payload))} {
		body = binary.BigEndian.AppendUint32(body, v) // times, uid, gid, auth uid, auth gid, length
	}
	body = append(body, payload...)
	msg := []byte{0x00, 0x60, 0x6d, 0x4b, 4, 5, 0}
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(body)))
	return append(msg, body...)
}

// Decodes wait for a turn rather than all asking munged at once: a burst
// of reports must not overflow munged's listen backlog, which the host's
// Slurm daemons share.
func TestWireDecodeBoundsConcurrentRequests(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "munge.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var open, most atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n := open.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				c.Read(make([]byte, 4096))
				time.Sleep(20 * time.Millisecond)
				open.Add(-1)
				c.Write(decodeAnswer([]byte("payload")))
			}()
		}
	}()
	w := &munge.Wire{Path: sock, MaxInFlight: 3}
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			c, err := w.Decode(context.Background(), "MUNGE:AAAA:")
			if err != nil || c.Addr.String() != "127.0.0.9" || c.UID != 0 || string(c.Payload) != "payload" {
				t.Errorf("decode: %+v, %v; want uid 0 from 127.0.0.9 with the payload", c, err)
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > 3 {
		t.Errorf("munged had %d requests open at once; the bound is 3", m)
	}
}

// A socket that refuses for a moment (munged restarting; a full backlog
// refuses the same way) is tried again, as libmunge does: nothing was sent,
// so the second try is no replay.
func TestWireDecodeTriesARefusedSocketAgain(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "munge.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// The socket file stays and nobody listens: connect is refused.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	up := make(chan net.Listener, 1)
	time.AfterFunc(15*time.Millisecond, func() {
		os.Remove(sock)
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Error(err)
			close(up)
			return
		}
		up <- l
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.Read(make([]byte, 4096))
			c.Write(decodeAnswer([]byte("p")))
		}()
	})
	defer func() {
		if l, ok := <-up; ok {
			l.Close()
		}
	}()
	c, err := (&munge.Wire{Path: sock, Timeout: time.Second}).Decode(context.Background(), "MUNGE:AAAA:")
	if err != nil || c.Addr.String() != "127.0.0.9" {
		t.Fatalf("decode while munged came back 15 ms later: %+v, %v; want the credential", c, err)
	}
}

// A munged that answers in another message format is refused, and the
// credential is not asked again through Enc: the first munged may have
// decoded it, and libmunge's own retries pass munged's replay check.
func TestWireDecodeRefusesOtherMessageVersion(t *testing.T) {
	sock := silentMunged(t, []byte{0x00, 0x60, 0x6d, 0x4b, 5, 5, 0, 0, 0, 0, 0})
	enc := &recordingCodec{c: munge.Cred{UID: 0, Payload: []byte("p")}}
	_, err := (&munge.Wire{Path: sock, Enc: enc, Timeout: time.Second}).Decode(context.Background(), "MUNGE:AAAA:")
	if err == nil || !strings.Contains(err.Error(), "message version 5") || enc.calls.Load() != 0 {
		t.Fatalf("decode against a munged of message version 5: %v, %d calls to Enc; want a refusal naming the version and no second decode", err, enc.calls.Load())
	}
}

// recordingCodec is a Codec that answers every decode with c and counts
// them: the stand-in for libmunge, to see that Wire never hands it a
// credential to decode again.
type recordingCodec struct {
	c     munge.Cred
	calls atomic.Int32
}

func (r *recordingCodec) Encode(context.Context, []byte) (string, error) { return "", errors.New("no") }
func (r *recordingCodec) Socket() string                                 { return "" }
func (r *recordingCodec) Decode(context.Context, string) (munge.Cred, error) {
	r.calls.Add(1)
	return r.c, nil
}

// listenFDEnv makes this test binary, started as a child by
// TestWireDecodeRefusesASocketOfAnotherUser, call listen() on its fd 3 and
// exit: the kernel then records the child's uid as the socket's server,
// which is what the decoder asks (SO_PEERCRED).
const listenFDEnv = "LLMGW_WIRE_TEST_LISTEN_FD3"

func init() {
	if os.Getenv(listenFDEnv) != "1" {
		return
	}
	if err := syscall.Listen(3, 16); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// A socket whose listener is neither root, the munge user nor this
// process's user is not munged's: a user who squats the path (munged down,
// a directory others may write to) would otherwise decide who every report
// comes from. The same answer from a listener of this process's own is
// taken.
//
// Seen failing as it should: without checkServer, the decode through the
// socket nobody listens on returned uid 0's credential.
func TestWireDecodeRefusesASocketOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the listener is made by a child running as nobody")
	}
	// Not t.TempDir: nobody must reach the binary it runs.
	dir, err := os.MkdirTemp("/var/tmp", "llmgw-wire-test.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "munge.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}

	// Bound here, listened on by the child as nobody (65534), served here.
	sock := filepath.Join(dir, "munge.socket")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "squatter")
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), listenFDEnv+"=1")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child listening as nobody: %v: %s", err, out)
	}
	l, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	serveAnswer(t, l, decodeAnswer([]byte("payload")))

	_, err = (&munge.Wire{Path: sock}).Decode(context.Background(), "MUNGE:AAAA:")
	var me *munge.Error
	if !errors.As(err, &me) || me.Status != munge.StatusSocket || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), sock) {
		t.Errorf("decode through a socket nobody listens on: %v; want a socket error naming uid 65534 and %s", err, sock)
	}
	own := silentMunged(t, decodeAnswer([]byte("payload")))
	if c, err := (&munge.Wire{Path: own}).Decode(context.Background(), "MUNGE:AAAA:"); err != nil || string(c.Payload) != "payload" {
		t.Errorf("the same answer from this process's own listener: %+v, %v; want it taken", c, err)
	}
}

// The answer is read into the request's buffer, so header and body come in
// one read when munged writes them at once; an answer longer than the
// request, or written in pieces, must be read whole all the same.
func TestWireDecodeReadsAnswerInPieces(t *testing.T) {
	for name, tc := range map[string]struct {
		payload []byte
		pieces  []int // where the answer is cut between writes
	}{
		"at once":                    {[]byte("payload"), nil},
		"header, then body":          {[]byte("payload"), []int{11}},
		"byte by byte":               {[]byte("payload"), []int{1, 2, 3, 5, 8, 13, 21, 34, 55}},
		"longer than the request":    {[]byte(strings.Repeat("p", 10000)), nil},
		"longer, header cut":         {[]byte(strings.Repeat("p", 10000)), []int{7, 4000}},
		"followed by what is unread": {[]byte("payload"), nil},
	} {
		answer := decodeAnswer(tc.payload)
		full := len(answer)
		if name == "followed by what is unread" {
			answer = append(answer, "junk"...)
		}
		sock := silentMunged(t, answer, tc.pieces...)
		c, err := (&munge.Wire{Path: sock, Timeout: 5 * time.Second}).Decode(context.Background(), "MUNGE:AAAA:")
		if err != nil || string(c.Payload) != string(tc.payload) || c.Addr.String() != "127.0.0.9" {
			t.Errorf("%s (%d bytes): %+v, %v; want the payload from 127.0.0.9", name, full, len(c.Payload), err)
		}
	}
}
