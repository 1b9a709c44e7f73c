package coordinator

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// The coordinator's side of one copy per fabric (issue 18, docs/design.md
// "The swarm"): the nodes of a fabric fetching one catalog file at its
// pinned digest form a swarm; the coordinator holds, per swarm, the origin
// lease, the chunk digests and what each member has, and answers each
// member's report (POST /v1/swarm) with a plan. It is soft state in memory,
// but for the file's digest list, which the catalog records once two
// members verified the whole file (swarmsums.go): members report every few
// hundred milliseconds and resend their digests to a new instance, so after
// a restart a swarm is whole again within one report interval, and a lease
// lost with the process is taken again by the first member to ask.
//
// By idea: this file, the registry and a report's path through it;
// swarmcheck.go, what a report may say (the catalog's file, its chunks, the
// node's fabric); swarmlease.go, the origin lease and the evidence that
// keeps it; swarmsums.go, the chunk digests; swarmplan.go, what a member is
// told; swarmexpire.go, the bounds and the expiry; swarmstatus.go, what an
// admin sees.
//
// Nothing a member says that the design cannot check is taken on its word
// (issue 24): its fabric is Slurm's, the file, its size and chunk size the
// catalog's and the coordinator's, its digests count only as an origin
// reader's, and a lease is kept by evidence (digests published), not by a
// counter the holder could make up.

// Swarm bounds: every member is an authenticated node, but one node (or a
// stolen node credential) must not be able to grow the coordinator's memory
// without limit.
const (
	// swarmsPerNode is how many memberships one node may have at once:
	// every swarm it joined, complete and gone included, until the
	// membership expires (swarmexpire.go).
	swarmsPerNode = 16
	// maxSwarms is how many swarms the coordinator keeps at once.
	maxSwarms = 4096
	// maxChunks bounds a swarm's chunk count: 65,536 chunks of 16 MiB is
	// 1 TiB, of 64 MiB 4 TiB (swarmChunk grows the chunk for a larger file).
	maxChunks = 1 << 16
	// swarmIdle: a swarm nobody reported on for this long is dropped, and a
	// member silent this long leaves it.
	swarmIdle = 10 * time.Minute
	// completeRetention: a member that finished and left (Gone with
	// Complete) stays offered as a complete peer this long after its last
	// swarm report, unless its node goes stale first.
	completeRetention = 10 * time.Minute
	// unreachableFor: a peer a member could not connect to is left out of
	// that member's plans this long.
	unreachableFor = 5 * time.Second
	// badQuorum: a peer reported bad by this many distinct members is left
	// out of every plan; by fewer, only out of its accusers' plans, so that
	// one lying node cannot cut a good peer out for all.
	badQuorum = 2
)

type swarmKey struct{ fabric, source, sha string }

// fileKey names a file's digest list: the same in every fabric's swarm of
// it, for one chunk size.
type fileKey struct {
	source, sha string
	chunk       int64
}

func (k swarmKey) file(chunk int64) fileKey { return fileKey{k.source, k.sha, chunk} }

type swarmMember struct {
	node string
	// addrs are where the node's credentials may come from, as the plan's
	// Members carry them to chunk servers (nodeAddrs).
	addrs    []string
	have     []byte
	verified int
	complete bool
	gone     bool
	// held says the member published a digest under this swarm's origin
	// lease since this coordinator started: its digests are an origin
	// reader's.
	held bool
	// noLeaseUntil: a member that lost the lease for want of evidence is
	// not given it again before then while another member can take it.
	noLeaseUntil time.Time
	last         time.Time
	// waitUntil is when the wait this member's last report asked for ends
	// (SwarmReport.WaitMs): until then it is live though silent.
	waitUntil time.Time
	fromOrig  int64
	// origDropped is the part of fromOrig the member dropped with origin
	// reads that broke off (api.SwarmReport.OriginDiscarded).
	origDropped int64
	fromPeers   int64
	// bad and unreach are the peers this member accused.
	bad     map[string]bool
	unreach map[string]time.Time
	// suspect are chunks this member held when their digests were
	// withdrawn (takeMismatch): its claims of them are not taken until a
	// report of it no longer makes them (it dropped them, as an agent
	// does on seeing the digest withdrawn), since it verified them against
	// a forger's digests.
	suspect bitmap
}

// bitmap is a set of chunks, as api.SwarmReport.Have.
type bitmap []byte

// keep takes out of have the chunks of b it still marks, and returns those
// (nil when none): a suspect chunk a member no longer claims is suspect no
// more, and one it still claims is not counted.
func (b bitmap) keep(have []byte) bitmap {
	var out bitmap
	for i := range b {
		if i >= len(have) {
			break
		}
		if x := b[i] & have[i]; x != 0 {
			if out == nil {
				out = make(bitmap, len(b))
			}
			out[i] = x
			have[i] &^= x
		}
	}
	return out
}

type swarm struct {
	key       swarmKey
	model     string
	size      int64
	chunkSize int64
	chunks    int
	digests   // swarmsums.go
	lease     // swarmlease.go

	members map[string]*swarmMember
	// names are the members' names, sorted: plans list peers in that order.
	names []string
	// badBy maps a peer to the members that reported it bad.
	badBy        map[string]map[string]bool
	last         time.Time
	fromOrigin   int64
	fromPeers    int64
	leaseChanges int64
	// changed is closed, and dropped, when the swarm changes in a way a
	// waiting member may act on (SwarmReport.WaitMs): a digest stored, a
	// member verifying more chunks, the lease moving.
	changed chan struct{}
}

// maxSwarmWait bounds SwarmReport.WaitMs: a member must still report often
// enough to keep its place (SwarmLeaseTimeout), and a held request is a
// goroutine and a connection on the coordinator.
const maxSwarmWait = 2 * time.Second

// notify wakes the members waiting on g. Called under sw.mu.
func (g *swarm) notify() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// swarms is the coordinator's registry of swarms. One lock guards it all;
// a report holds it for work in proportion to its own swarm's members and
// chunks, never to the registry's size (issue 24: every report walked every
// swarm, 1.38 ms a report with none and 4.58 ms at 4,000).
type swarms struct {
	mu sync.Mutex
	m  map[swarmKey]*swarm
	// byFile are each file's swarms, by fabric: a digest list recorded in
	// one fabric is every fabric's.
	byFile map[fileKey]map[string]*swarm
	// joined counts each node's memberships, every one until it expires.
	joined map[string]int
	// bytes totals the members' increments per fabric (swarmstatus.go).
	bytes fabricTraffic
	// resendUntil ends the window, from this process's first swarm report,
	// in which any member's digests are taken: the resends of members that
	// read the origin under a coordinator that restarted (swarmsums.go).
	resendUntil time.Time
	// sweeping starts the expiry's sweeps at the first swarm report;
	// expired is closed when they have ended.
	sweeping sync.Once
	expired  chan struct{}
}

func newSwarms() *swarms {
	return &swarms{m: map[swarmKey]*swarm{}, byFile: map[fileKey]map[string]*swarm{}, joined: map[string]int{}}
}

// exists says whether the swarm of key is in the registry.
func (sw *swarms) exists(key swarmKey) bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.m[key] != nil
}

// swarmIn is what postSwarm established about a report before it is
// applied: the node's fabric, the catalog's file and its chunking, whether
// the report's Have and Sums are in the swarm's chunks, the node's
// addresses, and, for a swarm not yet made, the file's recorded digests.
type swarmIn struct {
	fabric    string
	file      catalogFile
	chunkSize int64
	chunks    int
	readable  bool
	addrs     []string
	recorded  []string
}

// postSwarm answers POST /v1/swarm.
func (s *Server) postSwarm(w http.ResponseWriter, r *http.Request) error {
	var rep api.SwarmReport
	if err := decode(w, r, MaxReportBytes, "swarm report", &rep); err != nil {
		return err
	}
	if err := validSwarmReport(&rep); err != nil {
		return err
	}
	if err := s.speaksFor(r, rep.Node); err != nil {
		return err
	}
	in, err := s.swarmInput(r.Context(), &rep)
	if err != nil {
		return err
	}
	s.swarms.startExpiry(s)
	plan, wait, rec, err := s.swarms.report(s, &rep, in, s.now())
	if err != nil {
		return err
	}
	if rec != nil {
		if list := s.recordSums(r.Context(), rec); len(list) == len(plan.Sums) {
			plan.Sums, plan.Recorded = list, true
		}
	}
	if wait != nil {
		// Nothing to read yet: answer when there is, or at WaitMs. The
		// report is applied again then, which changes nothing but the
		// member's last word (it said the same), and the plan is fresh.
		t := time.NewTimer(min(time.Duration(rep.WaitMs)*time.Millisecond, maxSwarmWait))
		select {
		case <-wait:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		rep.WaitMs = 0
		if plan, _, _, err = s.swarms.report(s, &rep, in, s.now()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}

// swarmInput checks rep against what the coordinator knows (the node's
// fabric, the catalog's file, the chunking) and gathers what applying it
// needs, outside the registry's lock: each step may wait (Slurm's node
// list, a name lookup, the database).
func (s *Server) swarmInput(ctx context.Context, rep *api.SwarmReport) (swarmIn, error) {
	// The fabric is Slurm's (fabric_features) or the coordinator's own
	// record of the node, never the request's word: a node that could name
	// its fabric could join another fabric's swarm and be offered as its
	// peer.
	fabric, err := s.swarmFabric(ctx, rep)
	if err != nil {
		return swarmIn{}, err
	}
	file, err := s.swarmFile(rep)
	if err != nil {
		if rep.Gone {
			// Leaving needs no catalog file: a holder withdraws a copy gc
			// removed because the model was repinned or removed, and the
			// swarm it is in must stop offering it all the same.
			return s.leaving(fabric, rep), nil
		}
		return swarmIn{}, err
	}
	chunk := swarmChunk(file.size, s.cfg.SwarmMinChunk)
	if chunk == 0 {
		return swarmIn{}, api.Errorf(api.CodeInvalid, "swarm report from %s: model %s's file is %d bytes, over the %d chunks of %d bytes a swarm can have; it is fetched from the origin by each node", rep.Node, file.model, file.size, maxChunks, int64(SwarmMaxChunk))
	}
	in := swarmIn{fabric: fabric, file: file, chunkSize: chunk, chunks: int((file.size + chunk - 1) / chunk)}
	if in.readable, err = checkChunks(rep, chunk, in.chunks); err != nil {
		return swarmIn{}, err
	}
	in.addrs, _ = s.nodeAddrs(ctx, rep.Node)
	if !s.swarms.exists(swarmKey{fabric, rep.Source, rep.SHA256}) {
		// A new swarm starts from the list the catalog recorded, if any:
		// a read per swarm made, not per report.
		rec, err := s.db.ChunkSums(ctx, rep.Source, rep.SHA256, chunk)
		if err != nil {
			s.log.WithError(err).WithField("source", api.RedactSource(rep.Source)).Warn("swarm: reading the file's recorded chunk digests failed; the swarm starts without them")
		} else if len(rec) == in.chunks {
			in.recorded = rec
		}
	}
	return in, nil
}

// leaving is what a Gone report whose file the catalog no longer pins
// needs to be applied: the swarm's own chunking when the coordinator keeps
// it, and nothing of the report read (not readable).
func (s *Server) leaving(fabric string, rep *api.SwarmReport) swarmIn {
	in := swarmIn{fabric: fabric, chunkSize: rep.ChunkSize}
	sw := s.swarms
	sw.mu.Lock()
	if g := sw.m[swarmKey{fabric, rep.Source, rep.SHA256}]; g != nil {
		in.file = catalogFile{model: g.model, size: g.size, sha256: g.key.sha}
		in.chunkSize, in.chunks = g.chunkSize, g.chunks
	}
	sw.mu.Unlock()
	return in
}

// report applies one member's report to its swarm and returns its plan;
// when the member asked to wait (WaitMs) and the plan gives it nothing to
// do, a channel closed when the swarm next changes; and, when this report
// completes the evidence for the file's digest list, the list to record.
func (sw *swarms) report(s *Server, rep *api.SwarmReport, in swarmIn, now time.Time) (api.SwarmPlan, <-chan struct{}, *sumsRecord, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.resendUntil.IsZero() {
		sw.resendUntil = now.Add(resendWindow(s.cfg))
	}
	key := swarmKey{in.fabric, rep.Source, rep.SHA256}
	g := sw.m[key]
	var m *swarmMember
	if g != nil {
		m = g.members[rep.Node]
	}
	if m == nil {
		if rep.Gone {
			// Leaving a swarm it is not in: nothing to keep.
			return api.SwarmPlan{ChunkSize: in.chunkSize, Sums: []string{}, Peers: []api.SwarmPeer{},
				ReportEvery: int(s.cfg.SwarmReportEvery / time.Millisecond), Instance: s.instance}, nil, nil, nil
		}
		if n := sw.joined[rep.Node]; n >= swarmsPerNode {
			return api.SwarmPlan{}, nil, nil, api.Errorf(api.CodeUnavailable, "node %s is a member of %d swarms, the limit (finished ones count until they expire, %v after their last report); fetch from the origin or retry later", rep.Node, n, completeRetention)
		}
		if g == nil {
			if len(sw.m) >= maxSwarms {
				return api.SwarmPlan{}, nil, nil, api.Errorf(api.CodeUnavailable, "the coordinator holds %d swarms, its limit; fetch from the origin or retry later", maxSwarms)
			}
			g = sw.newSwarm(key, in, now)
		}
		m = sw.join(g, rep.Node)
	}
	g.last = now
	// What a waiting member may act on, before this report: compared at
	// the end, a change wakes the waiters.
	published0, holder0, verified0 := g.published, g.holder, m.verified
	log := s.log.WithFields(logrus.Fields{"fabric": in.fabric, "source": api.RedactSource(rep.Source), "node": rep.Node})

	m.addrs = in.addrs
	if in.readable {
		// A new slice, never the old one rewritten: plans handed out
		// earlier still reference the old one while they are encoded,
		// after sw.mu is released.
		m.have = append([]byte(nil), rep.Have...)
		m.suspect = m.suspect.keep(m.have)
		m.verified = countBits(m.have)
	}
	m.complete = rep.Complete
	if m.complete {
		m.verified = g.chunks
	}
	m.gone = false
	m.last = now
	if d := rep.FromOrigin - m.fromOrig; d > 0 {
		g.fromOrigin += d
		sw.bytes.add(in.fabric, d, 0)
	}
	if d := rep.FromPeers - m.fromPeers; d > 0 {
		g.fromPeers += d
		sw.bytes.add(in.fabric, 0, d)
	}
	sw.noteAccusations(g, m, rep, now, log)
	sw.takeMismatch(s, g, m, rep, in.readable, now, log)

	// The lease before the digests: a member that takes it now gives its
	// digests as the holder (after a restart, the seed taking the lease
	// back from a late joiner publishes what it read at once).
	sw.checkLease(s, g, m, rep, in.readable, now, log)
	m.fromOrig, m.fromPeers, m.origDropped = rep.FromOrigin, rep.FromPeers, rep.OriginDiscarded
	if rep.Gone {
		if g.holder == rep.Node {
			sw.passLease(s, g, now, "gone")
		}
		if !rep.Complete {
			sw.drop(g, rep.Node)
		} else {
			m.gone = true
		}
	} else {
		sw.takeLease(s, g, m, now, log)
	}
	known := sw.takeSums(g, m, rep, in.readable, now, log)
	if !rep.Gone {
		sw.takeValidator(g, m, rep, log)
	}
	rec := sw.claim(g, m, in.readable)

	plan := sw.plan(s, g, m, known, rep, now)
	if g.published != published0 || g.holder != holder0 || m.verified > verified0 || rep.Gone {
		g.notify()
	}
	if rep.WaitMs > 0 && !rep.Gone && idle(m, plan) {
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		m.waitUntil = now.Add(min(time.Duration(rep.WaitMs)*time.Millisecond, maxSwarmWait))
		return plan, g.changed, rec, nil
	}
	return plan, nil, rec, nil
}

// newSwarm makes the swarm of key and enters it in the registry.
func (sw *swarms) newSwarm(key swarmKey, in swarmIn, now time.Time) *swarm {
	g := &swarm{key: key, model: in.file.model, size: in.file.size, chunkSize: in.chunkSize, chunks: in.chunks,
		members: map[string]*swarmMember{}, badBy: map[string]map[string]bool{}, last: now}
	g.digests.init(in.chunks, in.recorded)
	sw.m[key] = g
	fk := key.file(in.chunkSize)
	if sw.byFile[fk] == nil {
		sw.byFile[fk] = map[string]*swarm{}
	}
	sw.byFile[fk][key.fabric] = g
	return g
}

// join makes node a member of g; the membership counts against the node's
// quota until it is dropped (drop, expire).
func (sw *swarms) join(g *swarm, node string) *swarmMember {
	m := &swarmMember{node: node, bad: map[string]bool{}, unreach: map[string]time.Time{}}
	g.members[node] = m
	i, _ := slices.BinarySearch(g.names, node)
	g.names = slices.Insert(g.names, i, node)
	sw.joined[node]++
	return m
}

// drop ends node's membership of g, and g itself when it was the last.
func (sw *swarms) drop(g *swarm, node string) {
	if g.members[node] == nil {
		return
	}
	delete(g.members, node)
	if i, ok := slices.BinarySearch(g.names, node); ok {
		g.names = slices.Delete(g.names, i, i+1)
	}
	if sw.joined[node]--; sw.joined[node] <= 0 {
		delete(sw.joined, node)
	}
	for _, o := range g.members {
		delete(o.bad, node)
		delete(o.unreach, node)
	}
	delete(g.badBy, node)
	for _, by := range g.badBy {
		delete(by, node)
	}
	delete(g.claims, node)
	if len(g.members) == 0 {
		sw.remove(g)
	}
}

// remove takes g out of the registry, with whatever members it has left.
func (sw *swarms) remove(g *swarm) {
	for n := range g.members {
		if sw.joined[n]--; sw.joined[n] <= 0 {
			delete(sw.joined, n)
		}
	}
	g.members = nil
	delete(sw.m, g.key)
	fk := g.key.file(g.chunkSize)
	if fs := sw.byFile[fk]; fs[g.key.fabric] == g {
		delete(fs, g.key.fabric)
		if len(fs) == 0 {
			delete(sw.byFile, fk)
		}
	}
	g.notify()
}

// noteAccusations takes rep's bad and unreachable peers. They count only
// against members of this swarm: a name that is not one costs nothing to
// keep.
func (sw *swarms) noteAccusations(g *swarm, m *swarmMember, rep *api.SwarmReport, now time.Time, log *logrus.Entry) {
	for _, p := range rep.Bad {
		if p == rep.Node || g.members[p] == nil {
			continue
		}
		if !m.bad[p] {
			log.WithField("peer", p).Warn("swarm: a member reports a peer that sent a bad chunk")
		}
		m.bad[p] = true
		if g.badBy[p] == nil {
			g.badBy[p] = map[string]bool{}
		}
		g.badBy[p][rep.Node] = true
	}
	for _, p := range rep.Unreachable {
		if p == rep.Node || g.members[p] == nil {
			continue
		}
		m.unreach[p] = now
	}
}

// sortedKeys is a map's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
