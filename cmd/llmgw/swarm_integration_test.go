//go:build integration

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Each node's chunk server on a fabric address of its own (127.0.0.1K),
// and its agent's metrics, on ports of this test's range.
func swarmPeerAddr(k int) string    { return fmt.Sprintf("127.0.0.%d:%d", 10+k, 31300+k) }
func swarmMetricsAddr(k int) string { return fmt.Sprintf("127.0.0.1:%d", 31310+k) }

// TestSwarmOnCluster is issue 18 on the dev cluster ("On the real
// cluster"): a 2-node job in ib-b for a model that only n1 (ib-a) holds.
// Everything is real: slurmd runs each node's Prolog and TaskProlog (the
// dev cluster's hooks), each node has its own agent process whose chunk
// server listens on its own fabric address, peers and the coordinator know
// the nodes by credentials from each node's own munged, and the origin is
// an HTTP server on 127.0.0.1 that counts what it sends.
//
// First a job on n1 fetches the model, so that n1 holds it as a real
// holder does: in its cache, served by its chunk server, and a complete
// member of ib-a's swarm at the coordinator. Then the job on n3 and n4:
// their Prologs, run at once, must cost the origin one copy (ib-b's one
// read), one node must get it from the other through the chunk servers,
// and n1 must serve nothing (fabrics are not connected). The job is told
// where the verified file is (LLMGW_MODEL_PATH), no node is drained, and
// the coordinator's status and metrics show the swarm's bytes per fabric.
//
// Seen failing as it should: with n3 and n4 lacking peer_addr the origin
// sent two copies for ib-b; with a fabric-blind swarm (one swarm for all
// fabrics, no fabric check at the chunk server) n1 served ib-b two copies.
func TestSwarmOnCluster(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	// The dev cluster's munged daemons (scripts/dev-cluster): the
	// coordinator decodes through the controller's, and each node's agent
	// and hooks sign with that node's own, whose origin is the node's
	// NodeAddr, as they would through /run/munge on a real node.
	ctlMunge := devMungeSocket(t, conf, "")
	scontrol, sinfo := slurmTools(t)
	e := &e2e{bin: bin, sl: sl}
	base := t.TempDir()

	// The coordinator with MUNGE on: reports only from Slurm's nodes, from
	// root on their addresses (127.0.0.1K here); the admin token still
	// changes the catalog.
	coordConf := filepath.Join(base, "coordinator.toml")
	if err := os.WriteFile(coordConf, []byte(fmt.Sprintf("munge_socket = %q\n", ctlMunge)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, bin, base, "--config", coordConf, "--report-interval", "1s",
		"--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	// Three 16 MiB chunks and a piece, random, so that no chunk repeats
	// another; the origin sends 32 MiB/s, so the second node reads the
	// first one's verified chunks while the first is still reading.
	data := make([]byte, 3*api.DefaultChunkSize+12345)
	rand.Read(data)
	size := int64(len(data))
	digest := sha256.Sum256(data)
	sum := hex.EncodeToString(digest[:])
	origin := &throttledOrigin{data: data, rate: 32 << 20}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	osrv := &http.Server{Handler: origin}
	go osrv.Serve(ol)
	t.Cleanup(func() { osrv.Close() })
	src := "http://" + ol.Addr().String() + "/m/swarm.gguf"
	const model = "swarm"
	if out, errs, err := runBin(t, bin, c.admin, "models", "add", model, src, "--sha256", sum, "--size", strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("models add %s: %v: %s%s", model, err, out, errs)
	}
	t.Cleanup(func() {
		if out, errs, err := runBin(t, bin, c.admin, "models", "rm", model); err != nil {
			t.Errorf("models rm %s: %v: %s%s", model, err, out, errs)
		}
	})

	// Each node's settings where the dev cluster's hooks read them, and
	// its agent reading the same file (as TestSubmitEndToEnd does), with
	// peer_addr and munge_socket: without either, or without the pin, the
	// nodes would each fetch from the origin (agent's whyNoSwarm).
	cacheOf := swarmAgents(t, bin, c, base, devNodes, e2eFabric)
	// A job on n1: its Prolog fetches the model through ib-a's swarm, of
	// which n1 is the only member.
	submit := func(args ...string) endedJob {
		t.Helper()
		out, err := sl.Run(ctx, "sbatch", append([]string{"--parsable", "--comment=llmgw:model=" + model}, args...)...)
		if err != nil {
			t.Fatalf("sbatch %s: %v", strings.Join(args, " "), err)
		}
		id := strings.TrimSpace(strings.Split(string(out), ";")[0])
		t.Cleanup(func() { sl.Run(context.Background(), "scancel", id) })
		return e.wait(t, id)
	}
	if j := submit("-w", "n1", "-N1", "-J", "llmgw-swarm-n1", "-o", "/dev/null", "--wrap", "true"); j.State != "COMPLETED" {
		t.Fatalf("the job on n1: %s; want COMPLETED with the model fetched", j.State)
	}
	checkFile := func(n string) {
		t.Helper()
		b, err := os.ReadFile(catalog.CachePathFor(cacheOf[n], src))
		if got := sha256.Sum256(b); err != nil || got != digest {
			t.Fatalf("%s's cache: %d bytes (%v); want the pinned file", n, len(b), err)
		}
	}
	checkFile("n1")
	for _, n := range []string{"n2", "n3", "n4"} {
		if _, err := os.Stat(catalog.CachePathFor(cacheOf[n], src)); !os.IsNotExist(err) {
			t.Fatalf("%s holds the model before its job (%v); only n1 may", n, err)
		}
	}
	before := scrapeAll(t)
	sentBefore := origin.sent.Load()
	if got := before["n1"].origin; got != float64(size) {
		t.Fatalf("n1 received %.0f bytes from the origin in its swarm fetch; want the file's %d (did the Prolog go through the agent's swarm?)", got, size)
	}
	t.Logf("n1 fetched the model: the origin sent %d bytes", sentBefore)

	// The 2-node job in ib-b. Each task prints its node and the path the
	// TaskProlog gave it.
	jobOut := filepath.Join(t.TempDir(), "job.out")
	start := time.Now()
	j := submit("-N2", "--ntasks-per-node=1", "--constraint=ib-b", "-J", "llmgw-swarm-ib-b", "-o", jobOut,
		"--wrap", `srun sh -c 'echo "node=$SLURMD_NODENAME path=$LLMGW_MODEL_PATH"'`)
	took := time.Since(start)
	out, _ := os.ReadFile(jobOut)
	t.Logf("job %s on %s in %.1f s:\n%s", j.ID, j.NodeList, took.Seconds(), out)
	if j.State != "COMPLETED" || j.NodeList != "n[3-4]" {
		t.Fatalf("the ib-b job: %s on %s; want COMPLETED on n[3-4]", j.State, j.NodeList)
	}
	for _, n := range []string{"n3", "n4"} {
		want := fmt.Sprintf("node=%s path=%s", n, catalog.CachePathFor(cacheOf[n], src))
		if !slices.Contains(strings.Split(strings.TrimSpace(string(out)), "\n"), want) {
			t.Errorf("the job's output lacks %q: the TaskProlog must tell each task the verified file on its node", want)
		}
		checkFile(n)
	}

	// The origin: ib-b's one read. A read broken off mid-chunk is taken
	// again from that chunk, so at most one chunk more than the file.
	after := scrapeAll(t)
	sent := origin.sent.Load() - sentBefore
	t.Logf("for ib-b the origin sent %d bytes for a %d-byte file (%.3f copies)", sent, size, float64(sent)/float64(size))
	if sent < size || sent > size+api.DefaultChunkSize {
		t.Errorf("the origin sent %d bytes for ib-b's two nodes; want one copy (%d), not one per node", sent, size)
	}
	delta := func(n string) swarmFigures { return after[n].minus(before[n]) }
	for _, n := range devNodes {
		d := delta(n)
		t.Logf("%s: received %.0f from the origin and %.0f from peers, served %.0f to peers", n, d.origin, d.peer, d.served)
	}
	// n1 and n2 took no part: nothing crossed from ib-a.
	for _, n := range []string{"n1", "n2"} {
		if d := delta(n); d != (swarmFigures{}) {
			t.Errorf("%s (ib-a) moved bytes for ib-b's job: %+v; fabrics are not connected", n, d)
		}
	}
	if before["n1"].served != 0 || after["n1"].served != 0 {
		t.Errorf("n1's chunk server served %.0f bytes; nobody of its fabric asked, and ib-b must not", after["n1"].served)
	}
	// One of n3 and n4 read the origin, and fed the other.
	seed, relay := "n3", "n4"
	if delta("n4").origin > delta("n3").origin {
		seed, relay = "n4", "n3"
	}
	s, r := delta(seed), delta(relay)
	if s.origin < float64(size) || r.origin != 0 || r.peer != float64(size) || s.served != float64(size) || s.peer != 0 || r.served != 0 {
		t.Errorf("want %s to read the file from the origin and %s to get all of it from %s's chunk server; got %s %+v, %s %+v",
			seed, relay, seed, seed, s, relay, r)
	} else {
		t.Logf("%s read the origin for ib-b; %s got the file from %s through the chunk servers, %.1f s for the whole job", seed, relay, seed, took.Seconds())
	}

	// What the coordinator shows: ib-b's swarm of two complete members,
	// one origin copy and one from peers; ib-a's of n1 alone.
	outJSON, errs, err := runBin(t, bin, c.admin, "status", "--json")
	var st api.Status
	if err != nil || json.Unmarshal([]byte(outJSON), &st) != nil {
		t.Fatalf("llmgw status --json: %v: %s", err, errs)
	}
	swarms := map[string]api.SwarmStatus{}
	for _, g := range st.Swarms {
		if g.Source == src {
			swarms[g.Fabric] = g
		}
	}
	if g := swarms["ib-b"]; g.Members != 2 || g.Complete != 2 || g.Model != model || g.FromOrigin != int64(s.origin) || g.FromPeers != size ||
		(g.Holder != "" && g.Holder != seed) {
		t.Errorf("status's ib-b swarm: %+v; want 2 members, both complete, %s's origin bytes and one copy from peers, and %s as the lease holder if any", g, seed, seed)
	}
	if g := swarms["ib-a"]; g.Members != 1 || g.Complete != 1 || g.FromPeers != 0 || (g.Holder != "" && g.Holder != "n1") {
		t.Errorf("status's ib-a swarm: %+v; want n1 alone, complete, nothing from peers", g)
	}
	fabricBytes := map[string]api.FabricSwarmBytes{}
	for _, b := range st.SwarmBytes {
		fabricBytes[b.Fabric] = b
	}
	if b := fabricBytes["ib-b"]; b.FromOrigin != int64(s.origin) || b.FromPeers != size {
		t.Errorf("status's bytes for ib-b: %+v; want %.0f from the origin and %d from peers", b, s.origin, size)
	}
	if b := fabricBytes["ib-a"]; b.FromOrigin != size || b.FromPeers != 0 {
		t.Errorf("status's bytes for ib-a: %+v; want n1's one copy from the origin and nothing from peers", b)
	}
	cm, err := scrape("http://" + strings.TrimPrefix(c.url, "http://") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		series string
		want   float64
	}{
		{`llmgw_coordinator_swarm_received_bytes_total{fabric="ib-b",from="origin"}`, s.origin},
		{`llmgw_coordinator_swarm_received_bytes_total{fabric="ib-b",from="peers"}`, float64(size)},
		{`llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="origin"}`, float64(size)},
		{`llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="peers"}`, 0},
		{`llmgw_coordinator_swarms{fabric="ib-b"}`, 1},
	} {
		if got, ok := cm[w.series]; !ok || got != w.want {
			t.Errorf("coordinator metric %s = %v (present %t); want %v", w.series, got, ok, w.want)
		}
	}
	text, errs, err := runBin(t, bin, c.admin, "status")
	t.Logf("llmgw status:\n%s%s", text, errs)
	if err != nil {
		t.Errorf("llmgw status: %v", err)
	}
	// The text an admin reads (api/table's swarm sections): ib-b's swarm
	// row names the node that read the origin as the lease holder, with
	// two complete members, and nothing in ib-b's rows names n1.
	if row := statusRow(text, "LEASE HOLDER", "ib-b"); len(row) < 5 || row[1] != model || row[2] != seed || row[3] != "2" || row[4] != "2" {
		t.Errorf("llmgw status's swarm row for ib-b: %q; want %s, lease holder %s, 2 members, 2 complete", row, model, seed)
	}
	if row := statusRow(text, "FROM PEERS %", "ib-b"); len(row) == 0 || row[len(row)-1] != "50%" {
		t.Errorf("llmgw status's bytes row for ib-b: %q; want half of what ib-b received from peers (one copy of two)", row)
	}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "ib-b" && strings.Contains(l, "n1") {
			t.Errorf("llmgw status names n1 in a row of ib-b: %q", l)
		}
	}
	noneDrained(t, sl)
}

// swarmAgents writes each of nodes' settings where the dev cluster's hooks
// read them and starts its agent on them, in the fabric fabric gives it,
// with its chunk server on its own fabric address (swarmPeerAddr), its
// metrics (swarmMetricsAddr) and its node's munged, reporting every second
// to the coordinator c; it returns each node's cache directory once every
// agent has reported and serves its metrics.
func swarmAgents(t *testing.T, bin string, c coordProcess, base string, nodes []string, fabric map[string]string) map[string]string {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	hookDir := filepath.Join(filepath.Dir(conf), "llmgw")
	if err := os.MkdirAll(hookDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cacheOf := map[string]string{}
	for _, n := range nodes {
		k := slices.Index(devNodes, n) + 1
		dir := filepath.Join(base, n)
		cacheOf[n] = filepath.Join(dir, "cache")
		for _, sub := range []string{"cache", "state", "run"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		toml := fmt.Sprintf("coordinator = %q\nmunge_socket = %q\nnode = %q\nfabric = %q\npeer_addr = %q\nmetrics_listen = %q\n"+
			"cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nreport_interval = \"1s\"\nscan_interval = \"1s\"\n",
			c.url, devMungeSocket(t, conf, n), n, fabric[n], swarmPeerAddr(k), swarmMetricsAddr(k),
			cacheOf[n], filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "agent.sock"))
		path := filepath.Join(hookDir, n+".toml")
		if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(path)
			os.Remove(nodeconf.ResolvedPath(path))
			os.Remove(hookDir) // only when empty
		})
		daemon(t, bin, nil, "agent", "--config", path, "--node", n)
	}
	// Every agent reported (through MUNGE) and serves its metrics.
	waitFor(t, 20*time.Second, fmt.Sprintf("the agents of %v reporting to the coordinator", nodes), func() bool {
		out, _, err := runBin(t, bin, c.admin, "status", "--json")
		var st api.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		for _, n := range nodes {
			if _, err := agentMetrics(swarmMetricsAddr(slices.Index(devNodes, n) + 1)); err != nil {
				return false
			}
		}
		return st.Nodes.Total >= len(nodes) && st.Nodes.Stale == 0
	})
	return cacheOf
}

// statusRow returns the fields of the row of fabric in the section of
// `llmgw status` whose header contains header, or nil.
func statusRow(text, header, fabric string) []string {
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "FABRIC") && strings.Contains(l, header):
			in = true
		case strings.TrimSpace(l) == "":
			in = false
		case in:
			if f := strings.Fields(l); f[0] == fabric {
				return f
			}
		}
	}
	return nil
}

// swarmFigures are one agent's swarm counters.
type swarmFigures struct{ origin, peer, served float64 }

func (a swarmFigures) minus(b swarmFigures) swarmFigures {
	return swarmFigures{a.origin - b.origin, a.peer - b.peer, a.served - b.served}
}

// agentMetrics reads one agent's swarm counters from its /metrics.
func agentMetrics(addr string) (swarmFigures, error) {
	m, err := scrape("http://" + addr + "/metrics")
	if err != nil {
		return swarmFigures{}, err
	}
	var f swarmFigures
	for name, dst := range map[string]*float64{
		`llmgw_agent_swarm_received_bytes_total{from="origin"}`: &f.origin,
		`llmgw_agent_swarm_received_bytes_total{from="peer"}`:   &f.peer,
		`llmgw_agent_swarm_served_bytes_total`:                  &f.served,
	} {
		v, ok := m[name]
		if !ok {
			return f, fmt.Errorf("%s/metrics has no %s", addr, name)
		}
		*dst = v
	}
	return f, nil
}

// scrapeAll reads every dev node's agent's swarm counters.
func scrapeAll(t *testing.T) map[string]swarmFigures {
	t.Helper()
	out := map[string]swarmFigures{}
	for i, n := range devNodes {
		f, err := agentMetrics(swarmMetricsAddr(i + 1))
		if err != nil {
			t.Fatalf("%s's agent: %v", n, err)
		}
		out[n] = f
	}
	return out
}

// scrape reads a Prometheus text page into series (name with its labels,
// as printed) and values.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}
