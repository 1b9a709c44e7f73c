package munge_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/munge"
)

// silentMunged listens on a socket in dir, reads what each connection
// sends and then answers with answer (nothing when nil) and keeps the
// connection open until the test ends.
func silentMunged(t *testing.T, answer []byte) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "munge.socket")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
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
				if answer != nil {
					c.Write(answer)
				}
			}()
		}
	}()
	return sock
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
