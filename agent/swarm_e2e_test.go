package agent

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// TestSwarmEnsureThreeAgents is issue 18's path end to end: three agents
// of one fabric, each running as the daemon does (its chunk server on
// 127.0.0.K, its reports), the real coordinator (sqlite, MUNGE), one
// origin; the Prolog's ensure of one pinned file on all three at once. The
// origin serves the file once, the other two get it from peers, every copy
// verified.
func TestSwarmEnsureThreeAgents(t *testing.T) {
	realm := mungetest.New(t)
	// Three 16 MiB chunks and a piece: the agents' chunk size is the
	// protocol's default, which the coordinator's default minimum allows.
	data, sum := testData(t, 3*api.DefaultChunkSize+12345)
	e := emptyFabric(t, realm, data, sum, api.DefaultChunkSize)
	names := []int{81, 82, 83}
	ips := map[string]string{}
	for _, k := range names {
		ips[fmt.Sprintf("n%d", k)] = fmt.Sprintf("127.0.0.%d", k)
	}
	e.url = startCoordinator(t, realm, ips, 0)
	// 64 MiB/s: the seed takes about a second, so the others read from it
	// while it reads (pipelined), not after.
	e.o = newFOrigin(t, e, 64<<20)

	var agents []*Agent
	for _, k := range names {
		agents = append(agents, startSwarmAgent(t, e, k, 0))
	}

	req := api.EnsureRequest{Source: e.o.url, SHA256: sum, Size: int64(len(data))}
	start := time.Now()
	paths := make([]string, len(agents))
	errs := make([]error, len(agents))
	took := make([]time.Duration, len(agents))
	// What each node's space record says its swarm fetch will still
	// write, at most, while it runs: the cache's budget counts it.
	claimed := make([]int64, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		ended := make(chan struct{})
		wg.Go(func() {
			defer close(ended)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			paths[i], errs[i] = a.ensure(ctx, req, nil)
			took[i] = time.Since(start)
		})
		wg.Go(func() {
			a.mu.Lock()
			f := a.fetcherLocked()
			a.mu.Unlock()
			for {
				if c, err := f.Claimed(context.Background(), a.cfg.CacheDir); err == nil {
					claimed[i] = max(claimed[i], c)
				}
				select {
				case <-ended:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	for i, a := range agents {
		if claimed[i] <= 0 || claimed[i] > int64(len(data)) {
			t.Errorf("%s: its swarm fetch claimed %d bytes in the space record at most; want some, no more than the file's %d", a.cfg.Node, claimed[i], len(data))
		}
	}
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: ensure: %v", a.cfg.Node, errs[i])
		}
		got, err := os.ReadFile(paths[i])
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: %s is not the origin's file (%v)", a.cfg.Node, paths[i], err)
		}
		if filepath.Dir(paths[i]) != a.cfg.CacheDir {
			t.Errorf("%s: the file is at %s, outside the cache directory %s", a.cfg.Node, paths[i], a.cfg.CacheDir)
		}
		t.Logf("%s: verified file after %v", a.cfg.Node, took[i].Round(time.Millisecond))
	}
	e.report(t)
	size := int64(len(data))
	if got := e.o.sent.Load(); got != size {
		t.Errorf("the origin served %d bytes for a %d-byte file; one copy per fabric", got, size)
	}
	e.o.mu.Lock()
	readers := len(e.o.byNode)
	e.o.mu.Unlock()
	if readers != 1 {
		t.Errorf("%d nodes read the origin, want one", readers)
	}
	// The chunk servers are the agents' own: what came from peers is what
	// the agents' metrics count.
	var fromPeers, fromOrigin int64
	for _, a := range agents {
		fromPeers += int64(testutil.ToFloat64(a.metrics.swarmBytes.WithLabelValues("peer")))
		fromOrigin += int64(testutil.ToFloat64(a.metrics.swarmBytes.WithLabelValues("origin")))
	}
	if fromPeers != 2*size || fromOrigin != size {
		t.Errorf("the agents read %d bytes from peers and %d from the origin, want two copies (%d) and one (%d)", fromPeers, fromOrigin, 2*size, size)
	}
	t.Logf("origin %d bytes = %.3f × file; peers %d bytes = %.3f × file", e.o.sent.Load(), float64(e.o.sent.Load())/float64(size), fromPeers, float64(fromPeers)/float64(size))
}

// startSwarmAgent runs an agent of fabric ib-a as the daemon runs, named
// nK, on 127.0.0.K (its chunk server on port, or any free one for 0: the
// agent tests of other worktrees on this machine may run at the same
// time, on the same addresses), reporting to e's coordinator
// with its own munged, and waits for its first report to be taken.
func startSwarmAgent(t *testing.T, e *fabricEnv, k, port int) *Agent {
	return startSwarmAgentWith(t, e, k, port, nil)
}

// startSwarmAgentWith is startSwarmAgent with set applied to the agent
// before it runs.
func startSwarmAgentWith(t *testing.T, e *fabricEnv, k, port int, set func(*Agent)) *Agent {
	ip := fmt.Sprintf("127.0.0.%d", k)
	cfg := testConfig(t)
	cfg.Node, cfg.Fabric = fmt.Sprintf("n%d", k), "ib-a"
	cfg.Coordinator = e.url
	cfg.MungeSocket = e.realm.Start(ip).Socket()
	if port == 0 {
		port = freePort(t, ip)
	}
	cfg.PeerAddr = fmt.Sprintf("%s:%d", ip, port)
	a := newTestAgent(t, cfg)
	// The origin knows a node by the address it connects from.
	a.swarm.origin = &http.Client{Transport: &http.Transport{DisableCompression: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
	e.mu.Lock()
	e.files[cfg.Node] = &a.swarm.files
	e.mu.Unlock()
	if set != nil {
		set(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	until(t, 10*time.Second, cfg.Node+"'s first report taken", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.result.LastOK.IsZero()
	})
	return a
}

// TestSwarmEnsureWaitsForAnotherFetch: while another process (a hand-run
// llmgw fetch, here a second Fetcher on the same lock directory) holds the
// file's lock, the swarm fetch neither starts nor touches the .part; when
// that process has put the file in place, ensure returns it and the origin
// served nothing.
func TestSwarmEnsureWaitsForAnotherFetch(t *testing.T) {
	realm := mungetest.New(t)
	data, sum := testData(t, api.DefaultChunkSize+999)
	e := emptyFabric(t, realm, data, sum, api.DefaultChunkSize)
	e.url = startCoordinator(t, realm, map[string]string{"n91": "127.0.0.91"}, 0)
	e.o = newFOrigin(t, e, 0)
	a := startSwarmAgent(t, e, 91, 0)
	f := a.fetcherLocked()
	other := &fetch.Fetcher{CacheDir: f.CacheDir, LockDir: f.LockDir}
	target := catalog.CachePathFor(f.CacheDir, e.o.url)
	part, release, err := other.LockFile(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := a.ensure(context.Background(), api.EnsureRequest{Source: e.o.url, SHA256: sum, Size: int64(len(data))}, nil)
		got <- err
	}()
	time.Sleep(time.Second)
	if n := len(e.o.requests()); n != 0 {
		t.Fatalf("the swarm fetch read the origin (%d requests) while another process held the file's lock", n)
	}
	// The other process finishes: the file in place, its lock released.
	if _, err := part.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := fetch.Seal(context.Background(), part, target+catalog.PartSuffix, target, fetch.Want{SHA256: sum, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ensure did not return after the other process finished")
	}
	if n := e.o.sent.Load(); n != 0 {
		t.Errorf("the origin served %d bytes; the file was there when the lock came free", n)
	}
}

// freePort is a port free on ip now, for an agent's peer_addr (which must
// name its port before the agent listens): a fixed one collided with the
// same test run from another worktree at the same time.
func freePort(t testing.TB, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
