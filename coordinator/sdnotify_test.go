package coordinator

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/coordinator/store"
)

// TestSdNotify runs Serve as systemd would run the Type=notify unit: READY=1
// must arrive only when the API answers, and STOPPING=1 on shutdown.
func TestSdNotify(t *testing.T) {
	if sent, err := sdNotify("", "READY=1"); sent || err != nil {
		t.Errorf("sdNotify without NOTIFY_SOCKET = %v, %v; want a no-op", sent, err)
	}
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv, err := New(ctx, Config{}, testTokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.notifySocket = path
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	buf := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("notify socket got %q, %v; want READY=1", buf[:n], err)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("READY=1 was sent, but the API does not answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz after READY=1: %s", resp.Status)
	}

	cancel()
	n, err = conn.Read(buf)
	if err != nil || string(buf[:n]) != "STOPPING=1" {
		t.Errorf("notify socket got %q, %v; want STOPPING=1", buf[:n], err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
}
