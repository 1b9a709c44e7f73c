package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/weights/catalog"
)

const (
	seedTestSrc  = "https://origin.example/m/big.gguf"
	seedTestSHA  = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	seedTestSize = 4 * api.DefaultChunkSize
	seedTestDir  = "/var/cache/llmgw"
)

// fakeAgent plays a node's agent over real HTTP: it reports every few tens
// of milliseconds with its own token, and when an answer asks it to seed,
// it fetches through the swarm as a real agent does (POST /v1/swarm: the
// lease holder counts its bytes from the origin, the others from peers),
// reporting the fetch's progress and then the model as held. It records
// every seed ask it is handed, and those handed after it reported holding
// the model.
type fakeAgent struct {
	t      *testing.T
	node   string
	fabric string
	c      *api.Client
	// obey: a node that ignores the asks (its fetch fails) never fetches.
	obey bool

	mu        sync.Mutex
	asks      []api.SeedAsk
	afterHeld int
	seq       int64
	started   time.Time
	progress  int64
	lease     *bool
	held      bool
	gone      bool
	stepped   time.Time
}

const chunkEvery = 500 * time.Millisecond

func (a *fakeAgent) report(ctx context.Context) {
	a.mu.Lock()
	a.seq++
	now := time.Now().UTC()
	r := &api.Report{ID: a.node, Seq: a.seq, Started: a.started, Time: now, Node: a.node, Fabric: a.fabric,
		Looked: true, AgentVersion: "fake", PeerAddr: "127.0.0.1:9",
		Cache: api.Cache{Dir: seedTestDir, FreeBytes: 1 << 40, TotalBytes: 2 << 40}}
	held := a.held
	if held {
		r.Weights = []api.Weight{{Path: catalog.CachePathFor(seedTestDir, seedTestSrc), Size: seedTestSize, Complete: true}}
	} else if a.lease != nil {
		r.Fetches = []api.Fetch{{Source: seedTestSrc, Done: a.progress, Total: seedTestSize, Rate: 1e6, Started: a.started, Progressed: now}}
	}
	a.mu.Unlock()
	ans, err := a.c.PostReport(ctx, r)
	if err != nil {
		if ctx.Err() == nil {
			a.t.Errorf("%s: report: %v", a.node, err)
		}
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asks = append(a.asks, ans.Seed...)
	if held && len(ans.Seed) > 0 {
		a.afterHeld++
	}
	if len(ans.Seed) > 0 && a.obey && a.lease == nil {
		a.lease = new(bool)
	}
}

// fetchStep advances a fetch under way by a chunk, through the swarm.
func (a *fakeAgent) fetchStep(ctx context.Context) {
	a.mu.Lock()
	if a.lease == nil || a.gone {
		a.mu.Unlock()
		return
	}
	// A chunk every chunkEvery: the fetch lasts longer than the command's
	// poll, so that it prints the fetch's progress.
	if a.progress > 0 && time.Since(a.stepped) < chunkEvery {
		a.mu.Unlock()
		return
	}
	a.stepped = time.Now()
	sr := api.SwarmReport{Node: a.node, Source: seedTestSrc, SHA256: seedTestSHA, Size: seedTestSize, ChunkSize: api.DefaultChunkSize}
	if a.progress > 0 {
		a.progress = min(a.progress+api.DefaultChunkSize, seedTestSize)
		for i := range int(a.progress / api.DefaultChunkSize) {
			sr.Have = api.SetChunk(sr.Have, i)
		}
		if *a.lease {
			sr.FromOrigin = a.progress
		} else {
			sr.FromPeers = a.progress
		}
	}
	if a.progress == seedTestSize {
		sr.Complete, sr.Gone = true, true
		a.held, a.gone = true, true
	}
	first := a.progress == 0
	a.mu.Unlock()
	plan, err := a.c.Swarm(ctx, sr)
	if err != nil {
		if ctx.Err() == nil {
			a.t.Errorf("%s: swarm: %v", a.node, err)
		}
		return
	}
	if first {
		a.mu.Lock()
		*a.lease = plan.Lease
		a.progress = 1 // under way
		a.mu.Unlock()
	}
}

func (a *fakeAgent) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for {
		a.report(ctx)
		a.fetchStep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *fakeAgent) state() (asks []api.SeedAsk, afterHeld int, held bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]api.SeedAsk(nil), a.asks...), a.afterHeld, a.held
}

// TestSeedCommand drives `llmgw seed` against a real coordinator over a
// database file, with fake agents reporting over real HTTP: the nodes the
// coordinator picks get the seed ask in their report answers, fetch, and
// are asked no more once they report the model; the command waits,
// printing progress, and exits 0. `llmgw status` then shows the swarm they
// formed: no lease holder left, both complete, one copy's bytes from the
// origin and one from a peer. A node that never fetches makes the command
// time out with a clear message and exit 1; --no-wait returns at once.
func TestSeedCommand(t *testing.T) {
	coordURL, nodeTok, adminTok := testCoordinatorWith(t, func(c *coordinator.Config) { c.ReportInterval = 2 * time.Second })
	admin := map[string]string{"LLMGW_COORDINATOR": coordURL, "LLMGW_TOKEN_FILE": adminTok}
	anon := map[string]string{"LLMGW_COORDINATOR": coordURL}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "big", seedTestSrc, "--sha256", seedTestSHA, "--size", "67108864"); code != 0 {
		t.Fatalf("models add: %s", errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	agents := map[string]*fakeAgent{}
	start := time.Now().UTC()
	for _, n := range []struct {
		node, fabric string
		obey         bool
	}{{"n1", "ib-a", true}, {"n2", "ib-a", true}, {"n3", "ib-a", false}, {"m1", "ib-b", true}} {
		tok, err := api.ReadToken(nodeTok(n.node))
		if err != nil {
			t.Fatal(err)
		}
		a := &fakeAgent{t: t, node: n.node, fabric: n.fabric, obey: n.obey, started: start,
			c: &api.Client{BaseURL: coordURL, Token: tok}}
		a.report(ctx) // known to the coordinator before the seed
		agents[n.node] = a
	}
	for _, a := range agents {
		wg.Add(1)
		go a.run(ctx, &wg)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"seed", "big"}, 2, "seed needs --fabric"},
		{[]string{"seed", "--fabric", "ib-a"}, 2, "seed takes one MODEL"},
		{[]string{"seed", "big", "--fabric", "ib-a", "--copies", "2", "--nodes", "n1"}, 2, "--copies and --nodes together"},
		{[]string{"seed", "big", "--fabric", "ib-a", "--copies", "0"}, 2, "at least one copy"},
		{[]string{"seed", "big", "--fabric", "ib-a", "--nodes", "n[1-"}, 2, "--nodes"},
		{[]string{"seed", "big", "--fabric", "ib-z"}, 1, "fabric ib-z has no node that reported to the coordinator; fabrics known: ib-a, ib-b"},
		{[]string{"seed", "nope", "--fabric", "ib-a"}, 1, "model nope is not in the catalog"},
		{[]string{"seed", "big", "--fabric", "ib-a", "--nodes", "m1"}, 1, "m1: not a node of fabric ib-a"},
	} {
		code, _, errs := llmgwRun(t, admin, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("llmgw %q: exit %d, %q; want exit %d naming %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	if code, _, errs := llmgwRun(t, anon, "seed", "big", "--fabric", "ib-a"); code != 1 || !strings.Contains(errs, "asking nodes to seed a model needs a bearer token") {
		t.Errorf("seed without a token: exit %d, %q", code, errs)
	}
	// LLMGW_FABRIC, exported for an agent on this host, does not choose
	// the fabric.
	if code, _, errs := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": coordURL, "LLMGW_TOKEN_FILE": adminTok, "LLMGW_FABRIC": "ib-a"},
		"seed", "big"); code != 2 || !strings.Contains(errs, "seed needs --fabric") {
		t.Errorf("seed with LLMGW_FABRIC set: exit %d, %q", code, errs)
	}

	// Two copies in ib-a, by nodes that fetch: n1 and n2 (n3 ignores its
	// asks, so it is named below, not left to the choice).
	began := time.Now()
	code, out, errs := llmgwRun(t, admin, "seed", "big", "--fabric", "ib-a", "--nodes", "n[1-2]", "--wait", "20s")
	t.Logf("llmgw seed (%.1fs):\n%s%s", time.Since(began).Seconds(), errs, out)
	if code != 0 {
		t.Fatalf("seed: exit %d", code)
	}
	for _, want := range []string{"asking n[1-2] in the answers to their reports until", "n1: fetching", "n2: holds it", "every node asked holds big"} {
		if !strings.Contains(errs, want) {
			t.Errorf("seed's stderr lacks %q", want)
		}
	}
	for _, want := range []string{"big in ib-a, 2 copies", "NODE  STATE  ASKED", "n1    done", "n2    done"} {
		if !strings.Contains(out, want) {
			t.Errorf("seed's table lacks %q", want)
		}
	}
	// Let a few more reports go by: held nodes must not be asked again.
	time.Sleep(300 * time.Millisecond)
	want := api.SeedAsk{Model: "big", Source: seedTestSrc, SHA256: seedTestSHA, Size: seedTestSize}
	for _, n := range []string{"n1", "n2"} {
		asks, after, held := agents[n].state()
		if !held || len(asks) == 0 || asks[0] != want {
			t.Errorf("%s: held %v, asks %+v; want asked %+v", n, held, asks, want)
		}
		if after != 0 {
			t.Errorf("%s was asked %d times after it reported holding big", n, after)
		}
	}
	for _, n := range []string{"n3", "m1"} {
		if asks, _, _ := agents[n].state(); len(asks) != 0 {
			t.Errorf("%s, not chosen, was asked %+v", n, asks)
		}
	}

	code, out, errs = llmgwRun(t, anon, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	t.Logf("llmgw status:\n%s", out)
	for _, want := range []string{"SWARMS", "FABRIC  MODEL  LEASE HOLDER  MEMBERS  COMPLETE  FROM ORIGIN  FROM PEERS  BAD/UNREACHABLE",
		"ib-a    big    -             0        2         67 MB        67 MB       -"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "ib-a 67 MB 67 MB 50%") {
		t.Error("status lacks ib-a's bytes from the origin and from peers")
	}

	// n3 never fetches: the wait ends with the reason, exit 1.
	code, out, errs = llmgwRun(t, admin, "seed", "big", "--fabric", "ib-a", "--nodes", "n3", "--wait", "1s", "--json")
	if code != 1 || !strings.Contains(errs, "after 1s, 1 node does not hold big yet (n3: asked, no fetch reported yet); the coordinator keeps asking until") {
		t.Errorf("seed on n3: exit %d, %q", code, errs)
	}
	var st api.SeedStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 1 || st.Nodes[0].State != api.SeedAsked || st.Nodes[0].Handed.IsZero() {
		t.Errorf("seed --json: %v:\n%s", err, out)
	}
	// Still asked after the command gave up, and shown in status.
	if asks, _, _ := agents["n3"].state(); len(asks) == 0 {
		t.Error("n3 was never handed the ask")
	}
	if _, out, _ := llmgwRun(t, anon, "status"); !strings.Contains(out, "SEEDING") || !strings.Contains(out, "big    ib-a    n3") {
		t.Errorf("status does not show the seed still asking n3:\n%s", out)
	}

	// Three copies: n1 and n2 count, n3 is asked again; --no-wait returns
	// at once.
	began = time.Now()
	code, out, errs = llmgwRun(t, admin, "seed", "big", "--fabric", "ib-a", "--copies", "3", "--no-wait")
	if code != 0 || time.Since(began) > 5*time.Second || !strings.Contains(errs, "n[1-2] hold big already; asking n3 in the answers to its reports") ||
		!strings.Contains(out, "n3    asked") {
		t.Errorf("seed --copies 3 --no-wait: exit %d in %s:\n%s%s", code, time.Since(began), errs, out)
	}
}

// lockedBuffer is a buffer two goroutines may write: an agent run
// in-process logs from several.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSeedRealAgents: the real agent (`llmgw agent`, run in-process) acts on
// the seed asks the coordinator hands it: the two nodes asked fetch the
// model from the origin (they have no peer configuration, so each reads the
// origin, which the request's note says), report it, and `llmgw seed`
// returns once both hold it. The node not asked fetches nothing.
func TestSeedRealAgents(t *testing.T) {
	coordURL, nodeTok, adminTok := testCoordinatorWith(t, func(c *coordinator.Config) { c.ReportInterval = time.Second })
	admin := map[string]string{"LLMGW_COORDINATOR": coordURL, "LLMGW_TOKEN_FILE": adminTok}

	weights := bytes.Repeat([]byte("llmgw seed test weights\n"), 1<<15) // 768 KiB
	sum := sha256.Sum256(weights)
	var gets atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		http.ServeContent(w, r, "small.gguf", time.Unix(1e9, 0), bytes.NewReader(weights))
	}))
	t.Cleanup(origin.Close)
	src := origin.URL + "/w/small.gguf"
	if code, _, errs := llmgwRun(t, admin, "models", "add", "small", src, "--sha256", hex.EncodeToString(sum[:]),
		"--size", strconv.Itoa(len(weights))); code != 0 {
		t.Fatalf("models add: %s", errs)
	}

	cacheOf := runAgents(t, []string{"n1", "n2", "n3"}, map[string]string{"LLMGW_COORDINATOR": coordURL}, func(node, _ string) []string {
		return []string{"agent", "--node", node, "--fabric", "ib-a", "--coordinator", coordURL, "--token-file", nodeTok(node)}
	})

	code, out, errs := llmgwRun(t, admin, "seed", "small", "--fabric", "ib-a", "--nodes", "n[1-2]", "--wait", "30s")
	t.Logf("llmgw seed:\n%s%s", errs, out)
	if code != 0 {
		t.Fatalf("seed: exit %d", code)
	}
	if !strings.Contains(errs, "n[1-2] reported no chunk server address") || !strings.Contains(out, "n1    done") || !strings.Contains(out, "n2    done") {
		t.Errorf("seed output lacks the note or the nodes done")
	}
	for _, n := range []string{"n1", "n2"} {
		b, err := os.ReadFile(catalog.CachePathFor(cacheOf[n], src))
		if err != nil || !bytes.Equal(b, weights) {
			t.Errorf("%s's cache: %d bytes, %v; want the weights", n, len(b), err)
		}
	}
	if _, err := os.Stat(catalog.CachePathFor(cacheOf["n3"], src)); !os.IsNotExist(err) {
		t.Errorf("n3, not asked, fetched: %v", err)
	}
	if g := gets.Load(); g < 2 {
		t.Errorf("the origin served %d GETs; two nodes each read it", g)
	}
}

// runAgents runs an in-process `llmgw agent` per node of fabric ib-a until
// the test ends, showing their logs if it fails, and returns once `llmgw
// status` (run with statusEnv) lists them all. args gives a node's own
// arguments (its dir is a fresh temp dir); the cache (dir/cache, returned
// by node), state, run dir, socket and intervals are added here.
func runAgents(t *testing.T, nodes []string, statusEnv map[string]string, args func(node, dir string) []string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	logs := map[string]*lockedBuffer{}
	cacheOf := map[string]string{}
	for _, node := range nodes {
		d := t.TempDir()
		cacheOf[node] = filepath.Join(d, "cache")
		os.MkdirAll(cacheOf[node], 0o755)
		logs[node] = &lockedBuffer{}
		a := append(args(node, d), "--cache-dir", cacheOf[node], "--state-dir", d, "--run-dir", filepath.Join(d, "run"),
			"--socket", filepath.Join(d, "s"), "--report-interval", "1s", "--scan-interval", "1s", "--gpu-memory", "80G")
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: logs[node], getenv: func(string) string { return "" }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := run(ctx, a, e); code != 0 && ctx.Err() == nil {
				t.Errorf("agent %s: exit %d", node, code)
			}
		}()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for n, l := range logs {
				t.Logf("agent %s:\n%s", n, l)
			}
		}
	})
	// Each node has reported before the test goes on.
	want := fmt.Sprintf("ib-a    %d      ", len(nodes))
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ := llmgwRun(t, statusEnv, "status")
		if code == 0 && strings.Contains(out, want) {
			return cacheOf
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agents did not report:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
