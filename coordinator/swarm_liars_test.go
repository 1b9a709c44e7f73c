package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
)

// The coordinator against the liars of issue 24: each test is the review's
// minimal form, played through the real server (its HTTP API, a real
// sqlite file), and each failed on main as its comment says.

// restarted is e's coordinator started again on its database: another
// process (another instance id), no swarms, the catalog and the nodes'
// tokens as they were.
func restarted(t *testing.T, e *testEnv) *testEnv {
	t.Helper()
	srv, err := New(context.Background(), e.srv.cfg, testTokens, e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.now = e.clock.now
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	r := *e
	r.srv, r.url = srv, ts.URL
	r.agent = &api.Client{BaseURL: ts.URL, Auth: e.agent.Auth}
	r.admin, r.anon = r.client(testTokens.Admin), r.client("")
	return &r
}

func wantRefused(t *testing.T, what string, err error, status int, words ...string) {
	t.Helper()
	if st, _ := apiCode(err); st != status {
		t.Errorf("%s: %v, want %d", what, err, status)
		return
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// TestSwarmOnlyForCatalogFiles (6): a swarm is only for a catalog file at
// its pinned sha256 and size. A squatter that reported S+1 first fixed the
// swarm's size, and every honest report was refused.
//
// Seen failing as it should on main: the squat was taken, then the honest
// report refused ("size_bytes ... differs from the swarm's").
func TestSwarmOnlyForCatalogFiles(t *testing.T) {
	e := swarmEnv(t)
	ctx := context.Background()
	squat := sreport("n2")
	squat.Size++
	_, err := e.agent.Swarm(ctx, squat)
	wantRefused(t, "a size one byte over the catalog's", err, 400, "size_bytes", "67108864")
	if _, err := e.agent.Swarm(ctx, sreport("n1")); err != nil {
		t.Fatalf("the honest report after the squat: %v", err)
	}
	other := sreport("n3")
	other.Source = "https://origin/not-in-the-catalog.gguf"
	_, err = e.agent.Swarm(ctx, other)
	wantRefused(t, "a source in no catalog entry", err, 404, "no file of the catalog")
	repinned := sreport("n3")
	repinned.SHA256 = strings.Repeat("b", 64)
	_, err = e.agent.Swarm(ctx, repinned)
	wantRefused(t, "another sha256", err, 409, "pinned to sha256 "+swarmSHA)
	if n := len(swarmsOf(e)); n != 1 {
		t.Errorf("%d swarms, want the honest one only", n)
	}
}

func swarmsOf(e *testEnv) []swarmKey {
	e.srv.swarms.mu.Lock()
	defer e.srv.swarms.mu.Unlock()
	var out []swarmKey
	for k := range e.srv.swarms.m {
		out = append(out, k)
	}
	return out
}

// TestSwarmChunkSizeIsTheCoordinators (7, 9): the chunk size is the
// coordinator's. A member that asks with another and holds nothing is told
// the swarm's; one that marks chunks of another size is refused with words,
// and the swarm goes on: a reporter with bigger chunks had fixed the
// swarm's, and an honest member's digest past its last chunk then panicked
// every report of the swarm.
//
// Seen failing as it should on main: the squatter's 2 MiB chunks were the
// swarm's, and the honest member's report panicked (the connection
// closed, no plan).
func TestSwarmChunkSizeIsTheCoordinators(t *testing.T) {
	const chunk = 1 << 20
	e := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute, SwarmMinChunk: chunk}, testTokens)
	for _, n := range []string{"n1", "n2", "n3"} {
		if _, err := e.agent.PostReport(context.Background(), report(n, "ib-a", 1)); err != nil {
			t.Fatal(err)
		}
	}
	addModel(t, e, api.Model{Name: "m", Source: swarmSource, SHA256: swarmSHA, Size: 4 * chunk})
	rep := func(node string, chunkSize int64, have ...int) api.SwarmReport {
		r := api.SwarmReport{Node: node, Source: swarmSource, SHA256: swarmSHA, Size: 4 * chunk, ChunkSize: chunkSize}
		for _, i := range have {
			r.Have = api.SetChunk(r.Have, i)
		}
		return r
	}
	ctx := context.Background()
	squat := rep("n2", 2*chunk, 0)
	squat.Sums = map[int]string{0: strings.Repeat("5", 64)}
	_, err := e.agent.Swarm(ctx, squat)
	wantRefused(t, "verified chunks of 2 MiB", err, 400, "chunk_size 2097152", "1048576-byte chunks")
	// A member that has not started, asking with the protocol's default.
	if p := ask(t, e, rep("n3", api.DefaultChunkSize)); p.ChunkSize != chunk || len(p.Sums) != 4 {
		t.Fatalf("a member that asked with %d-byte chunks: plan chunk_size %d with %d sums; want the coordinator's %d, 4 chunks", api.DefaultChunkSize, p.ChunkSize, len(p.Sums), chunk)
	}
	honest := rep("n1", chunk, 0, 1, 2, 3)
	honest.Complete = true
	honest.Sums = map[int]string{3: strings.Repeat("6", 64)}
	p, err := e.agent.Swarm(ctx, honest)
	if err != nil {
		t.Fatalf("an honest complete member's report: %v", err)
	}
	if p.ChunkSize != chunk || len(p.Sums) != 4 {
		t.Errorf("the honest member's plan: chunk_size %d, %d sums; want %d, 4", p.ChunkSize, len(p.Sums), chunk)
	}
	past := rep("n3", chunk)
	past.Sums = map[int]string{4: strings.Repeat("7", 64)}
	_, err = e.agent.Swarm(ctx, past)
	wantRefused(t, "a digest past the last chunk", err, 400, "sums has chunk 4", "chunks 0-3")
}

// TestSwarmLeaseNeedsEvidence (6): a holder that says it reads (its
// FromOrigin grows by 1 MiB every 200 ms) and publishes no digest loses the
// lease once its count passes a chunk with nothing published (and claimed,
// digestOverdue), to the other member, and is not given it back while that
// member can hold it.
//
// Seen failing as it should on main: the liar kept the lease for the whole
// 40 s the test runs; then, with two chunks of allowance and the lease
// timeout, for 11.4 s (fanout.sh --liars: the whole of its fabric's wait).
func TestSwarmLeaseNeedsEvidence(t *testing.T) {
	e := swarmEnv(t)
	liar := sreport("n1")
	if p := ask(t, e, liar); !p.Lease {
		t.Fatal("the first asker has no lease")
	}
	// A chunk and its slack at 5 MiB/s, and a report.
	limit := time.Duration(float64(DefaultSwarmMinChunk+DefaultSwarmMinChunk/digestSlack)/(5<<20)*float64(time.Second)) + 200*time.Millisecond
	var lost time.Duration
	for d := 200 * time.Millisecond; d <= 40*time.Second; d += 200 * time.Millisecond {
		e.clock.set(t0.Add(d))
		liar.FromOrigin += 1 << 20
		p := ask(t, e, liar)
		ask(t, e, sreport("n2"))
		if !p.Lease {
			lost = d
			break
		}
	}
	if lost == 0 || lost > limit {
		t.Fatalf("a holder that published no digest kept the lease for %v; want it gone within %v", lost, limit)
	}
	t.Logf("the liar lost the lease after %v", lost)
	e.clock.set(t0.Add(lost + 2*successorWait))
	if p := ask(t, e, liar); p.Lease {
		t.Errorf("the liar took the lease back at once")
	}
	if p := ask(t, e, sreport("n2")); !p.Lease {
		t.Errorf("n2 did not get the lease the liar lost (holder %q)", p.Holder)
	}
}

// TestSwarmLeaseNeedsAnOriginRate (6, what the first pass left): a holder
// that says it reads, a little at a time (4 KiB every 200 ms), and
// publishes nothing, loses the lease within the lease timeout: its count
// grows slower than an origin read (a chunk in slowestChunk: 256 KiB/s
// for these 16 MiB chunks). An honest holder reading at that floor keeps
// it.
//
// Seen failing as it should before: two chunks of allowance at that pace
// lasted over two hours, and the liar kept the lease for the whole 40 s
// the test runs.
func TestSwarmLeaseNeedsAnOriginRate(t *testing.T) {
	for _, c := range []struct {
		name string
		step int64 // bytes a report, every 200 ms
		keep bool
	}{{"a liar's trickle", 4 << 10, false}, {"an honest read at the floor", int64(minOriginRate(DefaultSwarmMinChunk))/5 + 1<<10, true}} {
		t.Run(c.name, func(t *testing.T) {
			e := swarmEnv(t)
			h := sreport("n1")
			if p := ask(t, e, h); !p.Lease {
				t.Fatal("the first asker has no lease")
			}
			var lost time.Duration
			for d := 200 * time.Millisecond; d <= 40*time.Second; d += 200 * time.Millisecond {
				e.clock.set(t0.Add(d))
				h.FromOrigin += c.step
				if p := ask(t, e, h); !p.Lease {
					lost = d
					break
				}
				ask(t, e, sreport("n2"))
				if c.keep && h.FromOrigin >= DefaultSwarmMinChunk {
					break // an honest holder publishes the chunk's digest now
				}
			}
			switch {
			case c.keep && lost != 0:
				t.Errorf("a holder reading at %d bytes/s lost the lease after %v", c.step*5, lost)
			case !c.keep && (lost == 0 || lost > DefaultSwarmLeaseTimeout+time.Second):
				t.Errorf("a holder counting 20 KiB/s and publishing nothing kept the lease %v; want it gone within the lease timeout (%v)", lost, DefaultSwarmLeaseTimeout)
			}
		})
	}
}

// TestSwarmValidatorNotOneHoldersForLife (6): a holder's validator is the
// swarm's only once it published a digest under its lease, and a later
// holder's replaces it: a made-up ETag from a first holder that read
// nothing made every later holder's If-Range fail the whole fetch.
//
// Seen failing as it should on main: the first holder's made-up validator
// was every plan's, and stayed so after n2 took the lease.
func TestSwarmValidatorNotOneHoldersForLife(t *testing.T) {
	e := swarmEnv(t)
	liar := sreport("n1")
	liar.Validator = `"made-up"`
	if p := ask(t, e, liar); !p.Lease || p.Validator != "" {
		t.Fatalf("the liar: lease %v, plan validator %q; want the lease and no validator", p.Lease, p.Validator)
	}
	liar.Gone = true
	ask(t, e, liar)
	honest := sreport("n2")
	honest.Validator = `"v2"`
	if p := ask(t, e, honest); !p.Lease || p.Validator != "" {
		t.Fatalf("n2: lease %v, validator %q; want the lease, and still no validator", p.Lease, p.Validator)
	}
	honest.Sums = map[int]string{0: strings.Repeat("8", 64)}
	honest.FromOrigin = DefaultSwarmMinChunk
	if p := ask(t, e, honest); p.Validator != `"v2"` {
		t.Fatalf("n2 published a digest: validator %q, want n2's", p.Validator)
	}
	// n2 leaves; n3 takes the lease, is answered 200 to If-Range (another
	// version at a CDN edge), reads again and publishes under its own.
	honest.Gone = true
	ask(t, e, honest)
	n3 := sreport("n3")
	ask(t, e, n3)
	n3.Validator = `"v3"`
	n3.Sums = map[int]string{1: strings.Repeat("9", 64)}
	if p := ask(t, e, n3); !p.Lease || p.Validator != `"v3"` {
		t.Errorf("n3 published under its own validator: lease %v, validator %q; want n3's", p.Lease, p.Validator)
	}
}

// TestSwarmDigestListRecorded (8): once two members report the whole file
// verified while the swarm's list was whole and never changed, the list is
// recorded with the pin; a coordinator started again on the database
// starts the swarm from it, and a holder's digest that contradicts it is
// refused and costs the holder its lease.
//
// Seen failing as it should on main: after the restart the plan carried no
// digest, and the contradicting holder's digest was published.
func TestSwarmDigestListRecorded(t *testing.T) {
	e := swarmEnv(t)
	ctx := context.Background()
	list := make([]string, 4)
	for i := range list {
		list[i] = fmt.Sprintf("%064x", 0xc0+i)
	}
	seed := sreport("n1")
	ask(t, e, seed)
	seed = sreport("n1", 0, 1, 2, 3)
	seed.Sums = map[int]string{0: list[0], 1: list[1], 2: list[2], 3: list[3]}
	ask(t, e, seed)
	seed.Sums, seed.Complete = nil, true
	ask(t, e, seed)
	if got, _ := e.db.ChunkSums(ctx, swarmSource, swarmSHA, DefaultSwarmMinChunk); got != nil {
		t.Fatalf("a list recorded on one member's word: %q", got)
	}
	peer := sreport("n2", 0, 1, 2, 3)
	peer.Complete = true
	if p := ask(t, e, peer); !p.Recorded {
		t.Errorf("the second complete member's plan does not say the list is recorded")
	}
	got, err := e.db.ChunkSums(ctx, swarmSource, swarmSHA, DefaultSwarmMinChunk)
	if err != nil || !slices.Equal(got, list) {
		t.Fatalf("recorded list %q (%v), want %q", got, err, list)
	}

	r := restarted(t, e)
	liar := sreport("n3")
	p := ask(t, r, liar)
	if !p.Recorded || !slices.Equal(p.Sums, list) {
		t.Fatalf("after a restart: recorded %v, sums %q; want the recorded list", p.Recorded, p.Sums)
	}
	if !p.Lease {
		t.Fatalf("n3 has no lease")
	}
	ask(t, r, sreport("n4"))
	liar.Sums = map[int]string{2: strings.Repeat("d", 64)}
	p = ask(t, r, liar)
	if p.Sums[2] != list[2] || p.Lease {
		t.Errorf("a holder contradicting the recorded list: chunk 2 %q, lease %v; want the recorded digest and no lease", p.Sums[2], p.Lease)
	}
	if st := swarmStatus(t, r, "ib-a"); !st.Recorded || !slices.Contains(st.Refuted, "n3") {
		t.Errorf("status: recorded %v, refuted %v; want recorded, n3 refuted", st.Recorded, st.Refuted)
	}
}

// TestSwarmResendAfterRestart (12): members resend their digests to a new
// instance (the plan's Instance); the coordinator takes them from any
// member in the first seconds of its swarm traffic, and after that only
// from origin readers.
//
// Seen failing as it should on main: after the restart the old seed's
// digests, resent by a member that no longer held the lease, were dropped,
// and the late joiner had nothing to read from peers.
func TestSwarmResendAfterRestart(t *testing.T) {
	e := swarmEnv(t)
	d0, d1 := strings.Repeat("e0", 32), strings.Repeat("e1", 32)
	seed := sreport("n1")
	p0 := ask(t, e, seed)
	seed = sreport("n1", 0, 1)
	seed.Sums = map[int]string{0: d0, 1: d1}
	ask(t, e, seed)

	r := restarted(t, e)
	// The first to ask the new process is another member: it holds the
	// lease now.
	if p := ask(t, r, sreport("n2")); !p.Lease || p.Instance == p0.Instance || p.Instance == "" {
		t.Fatalf("n2 first after the restart: lease %v, instance %q (was %q); want the lease and a new instance", p.Lease, p.Instance, p0.Instance)
	}
	// The old seed resends what it read.
	p := ask(t, r, seed)
	if p.Sums[0] != d0 || p.Sums[1] != d1 || p.SumsKnown != 2 {
		t.Fatalf("the old seed's resent digests: %q, known %d", p.Sums, p.SumsKnown)
	}
	if got := peerNames(ask(t, r, sreport("n3"))); !slices.Contains(got, "n1") {
		t.Errorf("the late joiner's peers %v lack the old seed", got)
	}
	// Past the window, a member that never held the lease gives nothing.
	r.clock.set(t0.Add(resendWindow(r.srv.cfg) + time.Second))
	ask(t, r, sreport("n2")) // the holder keeps reporting
	late := sreport("n4")
	late.Sums = map[int]string{2: strings.Repeat("e2", 32)}
	if p := ask(t, r, late); p.Sums[2] != "" {
		t.Errorf("a member that never read the origin published chunk 2's digest %q after the window", p.Sums[2])
	}
}

// TestSwarmPlanListsHolderBeforeItsFirstChunk (14): the lease holder is in
// every member's peers before it has verified a chunk, so a member caught
// up with it probes it, and reports it unreachable when it died.
//
// Seen failing as it should on main: n2's plan listed no peer while the
// holder had verified nothing.
func TestSwarmPlanListsHolderBeforeItsFirstChunk(t *testing.T) {
	e := swarmEnv(t)
	ask(t, e, sreport("n1"))
	p := ask(t, e, sreport("n2"))
	if p.Holder != "n1" || fmt.Sprint(peerNames(p)) != "[n1]" {
		t.Fatalf("n2's plan: holder %q, peers %v; want n1 as both", p.Holder, peerNames(p))
	}
	if p.Peers[0].Addr == "" || len(p.Peers[0].Have) != 0 {
		t.Errorf("the holder as a peer: %+v; want its address and nothing held", p.Peers[0])
	}
	// n3 has verified nothing and holds no lease: not a peer, but a member.
	ask(t, e, sreport("n3"))
	p = ask(t, e, sreport("n2"))
	if fmt.Sprint(peerNames(p)) != "[n1]" {
		t.Errorf("n2's peers %v, want n1 only", peerNames(p))
	}
	var members []string
	for _, m := range p.Members {
		members = append(members, m.Node)
	}
	if fmt.Sprint(members) != "[n1 n2 n3]" || p.AddrsBound {
		t.Errorf("members %v (bound %v), want n1 n2 n3, unbound without a node list", members, p.AddrsBound)
	}
}

// TestPeerAddrValidated (11): a node's chunk server address is a bounded
// host:port, or the report is refused with words: a 7 MiB one went out in
// every plan.
//
// Seen failing as it should on main: every one of them was stored.
func TestPeerAddrValidated(t *testing.T) {
	e := newEnv(t, Config{ReportInterval: 30 * time.Second}, testTokens)
	ctx := context.Background()
	for _, a := range []string{strings.Repeat("a", 7<<20), "10.1.0.5", "10.1.0.5:0", "10.1.0.5:99999", "10.1.0.5:84x",
		"[fe80::1%ib0]:8421", "0.0.0.0:8421", "bad_host:8421", ":8421", "-x.example:8421"} {
		r := report("n1", "ib-a", 1)
		r.PeerAddr = a
		_, err := e.agent.PostReport(ctx, r)
		wantRefused(t, fmt.Sprintf("peer_addr %.40q", a), err, 400, "peer_addr")
	}
	for i, a := range []string{"10.1.0.5:8421", "[2001:db8::5]:8421", "n1-ib.cluster.example:8421"} {
		r := report("n1", "ib-a", int64(i+1))
		r.PeerAddr = a
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Errorf("peer_addr %q: %v", a, err)
		}
	}
}

// TestSwarmForgedHolderRefuted (issue 24, the gap the first pass left): a
// lease holder that publishes made-up digests before a list is recorded,
// and serves bytes to match them, passes every chunk check of its readers;
// only the whole file fails the pin. The reader then says which digests it
// used (Mismatch), the coordinator names their origin reader: its digests
// are withdrawn, it loses the lease and is passed over for it, it is no
// peer and no reader any more, status and /metrics show it, and the next
// read proceeds: another member takes the lease and its digests are
// published.
//
// Seen failing as it should before: the report's mismatch field was an
// unknown field (400); without it, nothing moved the fabric on: the
// forger's digests stayed published and its lease held.
func TestSwarmForgedHolderRefuted(t *testing.T) {
	e := swarmEnv(t)
	base := pastResends(t, e)
	forged := make([]string, 4)
	for i := range forged {
		forged[i] = fmt.Sprintf("%064x", 0xf0+i)
	}
	liar := sreport("n1")
	if p := ask(t, e, liar); !p.Lease {
		t.Fatal("the first asker has no lease")
	}
	liar = sreport("n1", 0, 1, 2, 3)
	liar.Sums = map[int]string{0: forged[0], 1: forged[1], 2: forged[2], 3: forged[3]}
	liar.FromOrigin = 4 * DefaultSwarmMinChunk
	if p := ask(t, e, liar); !p.Lease || p.SumsKnown != 4 {
		t.Fatalf("the holder's digests: lease %v, known %d", p.Lease, p.SumsKnown)
	}
	// n2 read every chunk from n1 (they matched), and its file failed the
	// pin. n3 is further behind.
	ask(t, e, sreport("n3", 0))
	p := ask(t, e, sreport("n2", 0, 1, 2, 3))
	if !slices.Equal(p.Sums, forged) || !slices.Contains(peerNames(p), "n1") {
		t.Fatalf("n2's plan before: sums %q, peers %v", p.Sums, peerNames(p))
	}
	mis := sreport("n2")
	mis.Mismatch = slices.Clone(forged)
	p = ask(t, e, mis)
	if slices.ContainsFunc(p.Sums, func(s string) bool { return s != "" }) || slices.Contains(peerNames(p), "n1") || p.Holder == "n1" {
		t.Fatalf("n2's plan after its mismatch: sums %q, peers %v, holder %q; want the digests withdrawn, and n1 neither peer nor holder", p.Sums, peerNames(p), p.Holder)
	}
	// The lease goes to another member (the accuser, live and as far
	// ahead as any now that n3's chunk 0 is taken back), never back to n1
	// while one can take it; n1's digests are not taken again.
	if p.Holder != "n2" || !p.Lease {
		t.Fatalf("after the mismatch: holder %q; want n2, the live member now as far ahead as any", p.Holder)
	}
	e.clock.set(base.Add(2 * successorWait))
	if p := ask(t, e, liar); p.Lease || p.Holder != "n2" {
		t.Fatalf("the forger asking: lease %v, holder %q", p.Lease, p.Holder)
	}
	honest := sreport("n2", 0)
	honest.Sums = map[int]string{0: strings.Repeat("1", 64)}
	honest.FromOrigin = DefaultSwarmMinChunk
	if p := ask(t, e, honest); p.Sums[0] != strings.Repeat("1", 64) || p.Sums[1] != "" {
		t.Fatalf("the next read: sums %q; want n2's digest of chunk 0 published, n1's not back", p.Sums)
	}
	if p := ask(t, e, liar); p.Lease || p.Sums[1] != "" {
		t.Errorf("the forger again: lease %v, chunk 1 %q; want nothing", p.Lease, p.Sums[1])
	}
	// n3's chunk 0 was verified against n1's digest: not offered, nor
	// counted, even in a report n3 sent before it saw the digest go; once
	// n3 dropped it, a chunk 0 it verifies again counts.
	offered := func(what string, want bool) {
		t.Helper()
		e.srv.swarms.mu.Lock()
		g := e.srv.swarms.m[swarmKey{"ib-a", swarmSource, swarmSHA}]
		got := api.HasChunk(g.members["n3"].have, 0)
		e.srv.swarms.mu.Unlock()
		if got != want {
			t.Errorf("%s: n3's chunk 0 counted %v, want %v", what, got, want)
		}
	}
	offered("after the mismatch", false)
	ask(t, e, sreport("n3", 0))
	offered("n3's report sent before it dropped the chunk", false)
	ask(t, e, sreport("n3"))
	ask(t, e, sreport("n3", 0))
	offered("n3 verified chunk 0 again", true)
	st := swarmStatus(t, e, "ib-a")
	if !slices.Contains(st.Refuted, "n1") || !slices.Equal(st.LeaseRevoked, []string{"n1"}) {
		t.Errorf("status: refuted %v, lease revoked %v; want n1 in both", st.Refuted, st.LeaseRevoked)
	}
	if err := testutil.GatherAndCompare(e.srv.metrics.reg, strings.NewReader(`
# HELP llmgw_coordinator_swarm_lease_revoked_members Members of the swarms kept now that lost the origin lease for what they did (no evidence of reading, bad chunks, false digests), not for silence, per fabric.
# TYPE llmgw_coordinator_swarm_lease_revoked_members gauge
llmgw_coordinator_swarm_lease_revoked_members{fabric="ib-a"} 1
llmgw_coordinator_swarm_lease_revoked_members{fabric="ib-b"} 0
# HELP llmgw_coordinator_swarm_refuted_members Members of the swarms kept now whose chunk digests lost to other readers', contradict the recorded list or made a member's file fail the pin, per fabric (summed over swarms; status names them).
# TYPE llmgw_coordinator_swarm_refuted_members gauge
llmgw_coordinator_swarm_refuted_members{fabric="ib-a"} 1
llmgw_coordinator_swarm_refuted_members{fabric="ib-b"} 0
`), "llmgw_coordinator_swarm_refuted_members", "llmgw_coordinator_swarm_lease_revoked_members"); err != nil {
		t.Error(err)
	}
}

// TestSwarmMismatchBounded: a mismatch report is a member's word, so what
// it costs is bounded. Against digests a third member completed the file
// with, or the recorded list, it names nobody; and a member is heard
// maxAccusations times in a swarm.
func TestSwarmMismatchBounded(t *testing.T) {
	e := swarmEnv(t)
	pastResends(t, e)
	list := make([]string, 4)
	for i := range list {
		list[i] = fmt.Sprintf("%064x", 0xa0+i)
	}
	seed := sreport("n1")
	ask(t, e, seed)
	seed = sreport("n1", 0, 1, 2, 3)
	seed.Sums = map[int]string{0: list[0], 1: list[1], 2: list[2], 3: list[3]}
	ask(t, e, seed)
	done := sreport("n3", 0, 1, 2, 3)
	done.Complete = true
	ask(t, e, done)
	liar := sreport("n2")
	liar.Mismatch = slices.Clone(list)
	if p := ask(t, e, liar); !slices.Equal(p.Sums, list) || p.Holder != "n1" {
		t.Errorf("a mismatch against digests n3 completed the file with: sums %q, holder %q; want both kept", p.Sums, p.Holder)
	}
	if st := swarmStatus(t, e, "ib-a"); len(st.Refuted) != 0 {
		t.Errorf("refuted %v on one member's word against another's", st.Refuted)
	}

	// A swarm of another file, no complete member: a lying accuser is
	// heard maxAccusations times, each costing a holder its digests.
	src := "https://origin/b.gguf"
	addModel(t, e, api.Model{Name: "b", Source: src, SHA256: swarmSHA, Size: 4 * DefaultSwarmMinChunk})
	for _, n := range []string{"n5", "n6"} {
		r := report(n, "ib-a", 1)
		r.PeerAddr = "127.0.0.1:4100" + n[1:]
		if _, err := e.agent.PostReport(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	of := func(n string, f func(*api.SwarmReport)) api.SwarmReport {
		r := sreport(n)
		r.Source = src
		f(&r)
		return r
	}
	nothing := func(*api.SwarmReport) {}
	for k, h := range []string{"n1", "n3", "n5", "n6"} {
		e.clock.set(e.clock.now().Add(2 * successorWait))
		if p := ask(t, e, of(h, nothing)); !p.Lease {
			t.Fatalf("%s did not take the free lease (holder %q)", h, p.Holder)
		}
		d := fmt.Sprintf("%064x", 0xb0+k)
		ask(t, e, of(h, func(r *api.SwarmReport) { r.Have, r.Sums = api.SetChunk(nil, 0), map[int]string{0: d} }))
		p := ask(t, e, of("n4", func(r *api.SwarmReport) { r.Mismatch = []string{d} }))
		switch withdrawn := p.Sums[0] == ""; {
		case k < maxAccusations && !withdrawn:
			t.Fatalf("accusation %d against %s not heard", k+1, h)
		case k == maxAccusations && withdrawn:
			t.Fatalf("accusation %d heard; a member is heard %d times in a swarm", k+1, maxAccusations)
		}
		// The accuser leaves (it may have taken the lease), and comes
		// back with its next accusation: still the same accuser.
		ask(t, e, of("n4", func(r *api.SwarmReport) { r.Gone = true }))
	}
}

func with(r api.SwarmReport, f func(*api.SwarmReport)) api.SwarmReport { f(&r); return r }

// TestSwarmHolderThatReadNothingIsNoReader: a member that took the lease
// and published nothing under it (a fake holder: it only said it read) is
// no origin reader once it has lost the lease: its digests later do not
// freeze the chunks the next holder read. The liars benchmark's cycle
// does exactly this: fake lease progress, then made-up digests.
//
// Seen failing as it should before: taking the lease made a member an
// origin reader for the swarm's life, and its made-up digest froze the
// honest holder's chunk (none published; the fabric waited on it until
// the holder finished the whole file).
func TestSwarmHolderThatReadNothingIsNoReader(t *testing.T) {
	e := swarmEnv(t)
	base := pastResends(t, e)
	liar := sreport("n1")
	liar.FromOrigin = 1 << 20
	if p := ask(t, e, liar); !p.Lease {
		t.Fatal("the first asker has no lease")
	}
	ask(t, e, sreport("n2"))
	// The liar reports, and shows no evidence for the lease timeout: it
	// loses the lease.
	for d := 200 * time.Millisecond; d <= DefaultSwarmLeaseTimeout+time.Second; d += 200 * time.Millisecond {
		e.clock.set(base.Add(d))
		ask(t, e, liar)
		ask(t, e, sreport("n2"))
	}
	e.clock.set(base.Add(DefaultSwarmLeaseTimeout + 3*successorWait))
	if p := ask(t, e, sreport("n2")); !p.Lease {
		t.Fatalf("n2 did not take the lease the fake holder lost (holder %q)", p.Holder)
	}
	d := strings.Repeat("2", 64)
	honest := sreport("n2", 0)
	honest.Sums, honest.FromOrigin = map[int]string{0: d}, DefaultSwarmMinChunk
	ask(t, e, honest)
	liar = sreport("n1", 0, 1, 2, 3)
	liar.Complete = true
	liar.Sums = map[int]string{0: strings.Repeat("9", 64), 1: strings.Repeat("9", 64)}
	p := ask(t, e, liar)
	if p.Sums[0] != d || p.Sums[1] != "" {
		t.Errorf("after the fake holder's made-up digests: chunk 0 %q, chunk 1 %q; want n2's, and nothing", p.Sums[0], p.Sums[1])
	}
	if st := swarmStatus(t, e, "ib-a"); st.Frozen != 0 || !slices.Equal(st.LeaseRevoked, []string{"n1"}) {
		t.Errorf("status: %d frozen, lease revoked %v; want none frozen, n1 revoked", st.Frozen, st.LeaseRevoked)
	}
}

// TestSwarmGoneWhateverItsChunkSize: an agent withdraws a complete file
// its chunk server dropped (gone or replaced) with the chunk size it knows,
// which for a file a Fetcher fetched is the protocol's default, not the
// swarm's; and by then the catalog may have moved on (the model repinned
// or removed: gc removing the old copy is how the file went). The Gone is
// taken whatever its chunk size, and whatever the catalog says now, for a
// swarm the member is in: the coordinator stops offering it.
func TestSwarmGoneWhateverItsChunkSize(t *testing.T) {
	const chunk = 1 << 20
	for _, then := range []string{"", "repinned", "removed"} {
		t.Run("catalog "+cmp.Or(then, "as it was"), func(t *testing.T) {
			e := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute, SwarmMinChunk: chunk}, testTokens)
			for _, n := range []string{"n1", "n2"} {
				r := report(n, "ib-a", 1)
				r.PeerAddr = "127.0.0.1:4000" + n[1:]
				if _, err := e.agent.PostReport(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			addModel(t, e, api.Model{Name: "m", Source: swarmSource, SHA256: swarmSHA, Size: 4 * chunk})
			held := api.SwarmReport{Node: "n1", Source: swarmSource, SHA256: swarmSHA, Size: 4 * chunk, ChunkSize: api.DefaultChunkSize, Complete: true}
			ask(t, e, held)
			if p := ask(t, e, api.SwarmReport{Node: "n2", Source: swarmSource, SHA256: swarmSHA, Size: 4 * chunk, ChunkSize: chunk}); fmt.Sprint(peerNames(p)) != "[n1]" {
				t.Fatalf("n2's peers %v; want the complete holder n1", peerNames(p))
			}
			switch then {
			case "repinned":
				addModel(t, e, api.Model{Name: "m", Source: swarmSource, SHA256: strings.Repeat("c", 64), Size: 4 * chunk})
			case "removed":
				if err := e.admin.DeleteModel(context.Background(), "m"); err != nil {
					t.Fatal(err)
				}
			}
			gone := held
			gone.Complete, gone.Gone = false, true
			if _, err := e.agent.Swarm(context.Background(), gone); err != nil {
				t.Fatalf("the withdrawal (chunk size %d, the swarm's %d): %v", gone.ChunkSize, chunk, err)
			}
			e.srv.swarms.mu.Lock()
			g := e.srv.swarms.m[swarmKey{"ib-a", swarmSource, swarmSHA}]
			in := g != nil && g.members["n1"] != nil
			e.srv.swarms.mu.Unlock()
			if in {
				t.Errorf("n1 withdrew its copy and is still a member of the swarm")
			}
		})
	}
}
