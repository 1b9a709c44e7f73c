package api

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedDir makes a directory outside the test's private temp dir (whose
// 0700 parent would keep another user out), with mode.
func sharedDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "llmgw-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckSocketDir(t *testing.T) {
	if err := CheckSocketDir(filepath.Join(sharedDir(t, 0o755), "agent.sock")); err != nil {
		t.Errorf("a 0755 directory of ours: %v", err)
	}
	for _, mode := range []os.FileMode{0o777 | os.ModeSticky, 0o775, 0o757} {
		dir := sharedDir(t, mode)
		err := CheckSocketDir(filepath.Join(dir, "agent.sock"))
		if err == nil || !strings.Contains(err.Error(), "chmod 755 "+dir) {
			t.Errorf("a %v directory = %v; want a refusal with 'chmod 755 %s'", mode, err, dir)
		}
	}
	real := sharedDir(t, 0o755)
	link := filepath.Join(sharedDir(t, 0o755), "link")
	os.Symlink(real, link)
	if err := CheckSocketDir(filepath.Join(link, "agent.sock")); err == nil {
		t.Error("a symlinked socket directory was trusted")
	}
	if os.Geteuid() == 0 {
		dir := sharedDir(t, 0o755)
		os.Chown(dir, 65534, 65534)
		if err := CheckSocketDir(filepath.Join(dir, "agent.sock")); err == nil || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("a directory owned by uid 65534 = %v; want a refusal naming the owner", err)
		}
	}
}

// squatter is a socket server that binds as root and then listens as
// nobody (uid 65534), the credentials SO_PEERCRED reports: what a user who
// got to the socket path first looks like to a client. It answers every
// request with an ensure result pointing at the attacker's file.
const squatter = `
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
os.setgid(65534); os.setuid(65534)
s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    body = b'{"path":"/tmp/attacker/weights.gguf"}\n'
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    c.close()
`

func TestSquattedSocketIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve a socket as another user")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 to serve a socket as another user")
	}
	sock := filepath.Join(sharedDir(t, 0o755), "agent.sock")
	cmd := exec.Command(py, "-c", squatter, sock)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("squatter did not start: %q %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &LocalClient{Socket: sock}
	p, err := c.Ensure(ctx, EnsureRequest{Source: "hf:org/repo/m.gguf"}, nil)
	if err == nil || p != "" {
		t.Fatalf("Ensure through a socket served by uid 65534 = %q, %v; want a refusal", p, err)
	}
	if !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("refusal = %v; want ErrNoAgent (so the hook fetches itself) naming uid 65534", err)
	}
}
