package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/weights/catalog"
)

// throttledOrigin serves one file at a bounded rate and counts the bytes it
// sends: the site's uplink, which a fabric should cross once.
type throttledOrigin struct {
	data []byte
	rate int64 // bytes a second
	sent atomic.Int64
}

func (o *throttledOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("ETag", `"v1"`)
	http.ServeContent(throttledWriter{w, o}, r, "big.gguf", time.Unix(1e9, 0), bytes.NewReader(o.data))
}

type throttledWriter struct {
	http.ResponseWriter
	o *throttledOrigin
}

func (t throttledWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := min(len(p), 256<<10)
		time.Sleep(time.Duration(int64(n) * int64(time.Second) / t.o.rate))
		m, err := t.ResponseWriter.Write(p[:n])
		t.o.sent.Add(int64(m))
		if err != nil {
			return 0, err
		}
		p = p[n:]
	}
	return total, nil
}

// TestSeedThroughSwarm: `llmgw seed --copies 3` in one fabric, with real
// agents (run in-process) that serve chunks to their peers and know each
// other by MUNGE credentials (real munged daemons, one per simulated host
// 127.0.0.K), and a coordinator that checks them against its node list.
// The three nodes asked fetch the model through their swarm: the origin
// sends about one copy, not three; every node holds the verified file; and
// `llmgw status` shows the fabric's bytes from the origin and from peers.
func TestSeedThroughSwarm(t *testing.T) {
	realm := mungetest.New(t)
	coordSock := realm.Start("127.0.0.1").Socket()
	nodes := []string{"n1", "n2", "n3"}
	ips := map[string]string{}
	var known fixedNodes
	for i, n := range nodes {
		ips[n] = fmt.Sprintf("127.0.0.%d", 21+i)
		known = append(known, coordinator.KnownNode{Name: n, Addrs: []string{ips[n]}})
	}
	url, _, adminTok := testCoordinatorWith(t, func(c *coordinator.Config) {
		c.MungeSocket, c.SlurmUser = coordSock, "0"
		c.Nodes = known
		c.ReportInterval = time.Second
	})
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}

	data := make([]byte, 3*api.DefaultChunkSize+12345)
	rand.Read(data)
	sum := sha256.Sum256(data)
	origin := &throttledOrigin{data: data, rate: 48 << 20}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: origin}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	src := "http://" + l.Addr().String() + "/m/big.gguf"
	if code, _, errs := llmgwRun(t, admin, "models", "add", "big", src, "--sha256", hex.EncodeToString(sum[:]),
		"--size", strconv.Itoa(len(data))); code != 0 {
		t.Fatalf("models add: %s", errs)
	}

	cacheOf := runAgents(t, nodes, admin, func(n, d string) []string {
		// A port the kernel picks on the node's own address, for its
		// chunk server.
		pl, err := net.Listen("tcp", ips[n]+":0")
		if err != nil {
			t.Fatal(err)
		}
		peerAddr := pl.Addr().String()
		pl.Close()
		conf := filepath.Join(d, "agent.toml")
		os.WriteFile(conf, []byte(fmt.Sprintf("peer_addr = %q\n", peerAddr)), 0o644)
		return []string{"agent", "--config", conf, "--node", n, "--fabric", "ib-a", "--coordinator", url,
			"--munge-socket", realm.Start(ips[n]).Socket()}
	})

	code, out, errs := llmgwRun(t, admin, "seed", "big", "--fabric", "ib-a", "--copies", "3", "--wait", "60s")
	t.Logf("llmgw seed:\n%s%s", errs, out)
	if code != 0 {
		t.Fatalf("seed: exit %d", code)
	}
	if strings.Contains(errs, "note:") {
		t.Errorf("a seed through a swarm of pinned weights has a note: %s", errs)
	}
	for _, n := range nodes {
		b, err := os.ReadFile(catalog.CachePathFor(cacheOf[n], src))
		if err != nil || !bytes.Equal(b, data) {
			t.Errorf("%s's cache: %d bytes, %v; want the weights", n, len(b), err)
		}
	}
	sent := origin.sent.Load()
	t.Logf("origin sent %d bytes for 3 copies of a %d-byte file (%.2f copies)", sent, len(data), float64(sent)/float64(len(data)))
	if sent >= 2*int64(len(data)) {
		t.Errorf("the origin sent %.2f copies for one fabric; the swarm should read it about once", float64(sent)/float64(len(data)))
	}

	code, out, errs = llmgwRun(t, admin, "status", "--json")
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: exit %d: %s", code, errs)
	}
	if len(st.SwarmBytes) != 1 || st.SwarmBytes[0].Fabric != "ib-a" || st.SwarmBytes[0].FromPeers < int64(len(data)) ||
		st.SwarmBytes[0].FromOrigin < int64(len(data)) {
		t.Errorf("status's bytes per fabric = %+v; want one copy or more from the origin and at least one from peers", st.SwarmBytes)
	}
	_, out, _ = llmgwRun(t, admin, "status")
	t.Logf("llmgw status:\n%s", out)
}
