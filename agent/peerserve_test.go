package agent

// The chunk server's port taken by another user (issue 24, item 10).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// TestHelperSquatter is not a test: squat runs this test binary as
// another user to listen on $LLMGW_TEST_SQUAT until its stdin closes.
func TestHelperSquatter(t *testing.T) {
	addr := os.Getenv("LLMGW_TEST_SQUAT")
	if addr == "" {
		t.Skip("a helper process for TestAgentPeerPortTaken")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Printf("listening as uid %d\n", os.Getuid())
	io.Copy(io.Discard, os.Stdin)
	l.Close()
	os.Exit(0)
}

// squat listens on addr from a process of uid 65534 (nobody): a user of
// the node, not root, there first. It returns the release.
func squat(t *testing.T, addr string) func() {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy the other user may run: the test binary's own directory is
	// root's alone.
	dir, err := os.MkdirTemp("/var/tmp", "llmgw-squat.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "agent.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperSquatter$")
	cmd.Env = append(os.Environ(), "LLMGW_TEST_SQUAT="+addr)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "listening as uid 65534") {
		in.Close()
		cmd.Wait()
		t.Fatalf("the squatter did not listen on %s: %q", addr, line)
	}
	var done bool
	release := func() {
		if !done {
			done = true
			in.Close()
			cmd.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

// TestAgentPeerPortTaken: a user listening first on the agent's
// unprivileged peer port made the agent exit 1 on main. The agent now runs
// without a chunk server, says why (status, the errors its reports carry,
// llmgw_agent_peer_server_up), offers no peer address to the coordinator,
// fetches from the origin itself; and serves from the moment the port is
// free.
func TestAgentPeerPortTaken(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, 3<<20+17)
	e := emptyFabric(t, realm, data, sum, api.DefaultChunkSize)
	e.url = startCoordinator(t, realm, map[string]string{"n201": "127.0.0.201"}, 0)
	// An origin any fetcher reads (the Fetcher asks open ranges).
	o := newPinOrigin(t, data, data, 0)
	port := freePort(t, "127.0.0.201")
	release := squat(t, fmt.Sprintf("127.0.0.201:%d", port))
	a := startSwarmAgentWith(t, e, 201, port, func(a *Agent) { a.peerRetry = 200 * time.Millisecond })
	lc := &api.LocalClient{Socket: a.Config().Socket}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := lc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.PeerServerError, "address already in use") {
		t.Errorf("status says peer_server_error %q, want why the chunk server is not serving", st.PeerServerError)
	}
	if st.Report == nil || st.Report.PeerAddr != "" {
		t.Errorf("the report offers peer address %q while another process holds it", st.Report.PeerAddr)
	}
	if !slicesContains(st.Report.Errors, "another process holds the address") {
		t.Errorf("the report's errors do not say why the chunk server is not serving: %q", st.Report.Errors)
	}
	if v := testutil.ToFloat64(a.metrics.peerServerUp); v != 0 {
		t.Errorf("llmgw_agent_peer_server_up is %v while the port is taken", v)
	}
	p, err := lc.Ensure(ctx, api.EnsureRequest{Source: o.url, SHA256: sum, Size: int64(len(data))}, nil)
	if err != nil {
		t.Fatalf("ensure without a chunk server: %v", err)
	}
	if b, err := os.ReadFile(p); err != nil || hexOf(b) != sum {
		t.Fatalf("%s is not the origin's file (%v)", p, err)
	}
	release()
	until(t, 10*time.Second, "the agent serves once the port is free", func() bool {
		st, err := lc.Status(ctx)
		return err == nil && st.PeerServerError == "" && testutil.ToFloat64(a.metrics.peerServerUp) == 1
	})
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.201:%d", port))
	if err != nil {
		t.Fatalf("the chunk server does not accept connections: %v", err)
	}
	c.Close()
	until(t, 10*time.Second, "a report offers the peer address again", func() bool {
		st, err := lc.Status(ctx)
		return err == nil && st.Report != nil && st.Report.PeerAddr == fmt.Sprintf("127.0.0.201:%d", port)
	})
}

func slicesContains(list []string, part string) bool {
	for _, s := range list {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}
