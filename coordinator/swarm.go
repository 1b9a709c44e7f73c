package coordinator

import (
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// The coordinator's side of one copy per fabric (issue 18, docs/design.md
// "The swarm"): the nodes of a fabric fetching one source at one pinned
// digest form a swarm; the coordinator holds, per swarm, the origin lease,
// the chunk digests and what each member has, and answers each member's
// report (POST /v1/swarm) with a plan. All of it is soft state in memory:
// members report every few hundred milliseconds, so after a restart a swarm
// is whole again within one report interval, and a lease lost with the
// process is taken again by the first member to ask.

// Swarm bounds: every member is an authenticated node, but one node (or a
// stolen node credential) must not be able to grow the coordinator's memory
// without limit by naming sources it never fetches.
const (
	// swarmsPerNode is how many swarms one node may be a live member of.
	swarmsPerNode = 16
	// maxSwarms is how many swarms the coordinator keeps at once.
	maxSwarms = 4096
	// maxChunks bounds a swarm's chunk count: 65,536 chunks of 16 MiB is
	// 1 TiB, of 64 MiB 4 TiB.
	maxChunks = 1 << 16
	// swarmIdle: a swarm nobody reported on for this long is dropped.
	swarmIdle = 10 * time.Minute
	// completeRetention: a member that finished and left (Gone with
	// Complete) stays offered as a complete peer this long after its last
	// swarm report, unless its node goes stale first.
	completeRetention = 10 * time.Minute
	// unreachableFor: a peer a member could not connect to is left out of
	// that member's plans this long.
	unreachableFor = 5 * time.Second
	// deadHolderSilence: a lease holder another member cannot reach loses
	// the lease once it has also been silent this long (a killed seed:
	// connection refused).
	deadHolderSilence = 500 * time.Millisecond
	// successorWait is how long the lease is kept for the member furthest
	// ahead before the next asker may take it.
	successorWait = time.Second
	// badQuorum: a peer reported bad by this many distinct members is left
	// out of every plan; by fewer, only out of its accusers' plans, so that
	// one lying node cannot cut a good peer out for all.
	badQuorum = 2
)

// Where a stored chunk digest came from.
const (
	sumFromHolder   = 1 // a lease holder hashed it as it read the origin
	sumFromComplete = 2 // a member that verified the whole file against the pin
)

type swarmKey struct{ fabric, source, sha string }

type swarmMember struct {
	node     string
	have     []byte
	verified int
	complete bool
	gone     bool
	last     time.Time
	// waitUntil is when the wait this member's last report asked for ends
	// (SwarmReport.WaitMs): until then it is live though silent.
	waitUntil time.Time
	fromOrig  int64
	fromPeers int64
	// bad and unreach are the peers this member accused.
	bad     map[string]bool
	unreach map[string]time.Time
}

type swarm struct {
	key       swarmKey
	size      int64
	chunkSize int64
	chunks    int
	sums      map[int]string
	sumFrom   map[int]int
	validator string
	holder    string
	// heir, until heirUntil, is the member the lease is kept for.
	heir      string
	heirUntil time.Time
	// progressAt is when the holder last read from the origin (its
	// FromOrigin grew), or took the lease: a holder that keeps reporting
	// and reads nothing must not keep the fabric from the origin.
	progressAt time.Time

	members map[string]*swarmMember
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

// idle says whether plan gives member m nothing to do: no lease, and no
// peer holding a chunk m lacks whose digest is known.
func idle(m *swarmMember, plan api.SwarmPlan) bool {
	if plan.Lease || m.complete {
		return false
	}
	for i, d := range plan.Sums {
		if d == "" || api.HasChunk(m.have, i) {
			continue
		}
		for _, p := range plan.Peers {
			if p.Holds(i) {
				return false
			}
		}
	}
	return true
}

// swarms is the coordinator's registry of swarms.
type swarms struct {
	mu sync.Mutex
	m  map[swarmKey]*swarm
	// peerAddr is each node's chunk server address from its last report.
	peerAddr map[string]string
	// bytes totals the members' increments per fabric (swarmstatus.go).
	bytes fabricTraffic
}

func newSwarms() *swarms {
	return &swarms{m: map[swarmKey]*swarm{}, peerAddr: map[string]string{}}
}

// notePeerAddr records the chunk server address a node reported.
func (sw *swarms) notePeerAddr(node, addr string) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if addr == "" {
		delete(sw.peerAddr, node)
		return
	}
	sw.peerAddr[node] = addr
}

// validSwarmReport refuses what no swarm can be made of, naming the field.
func validSwarmReport(r *api.SwarmReport, minChunk int64) (chunks int, err error) {
	if r.Node == "" {
		return 0, api.Errorf(api.CodeInvalid, "swarm report: node is empty")
	}
	if err := shortText("node", r.Node); err != nil {
		return 0, err
	}
	if r.Source == "" {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: source is empty", r.Node)
	}
	if len(r.Source) > 4096 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: source is over 4096 bytes", r.Node)
	}
	if !validDigest(r.SHA256) {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: sha256 %.80q is not 64 lowercase hex digits; a swarm needs the pinned digest (llmgw models add --sha256)", r.Node, r.SHA256)
	}
	if r.Size <= 0 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: size_bytes %d must be positive", r.Node, r.Size)
	}
	if r.ChunkSize < minChunk || r.ChunkSize > SwarmMaxChunk {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: chunk_size %d is outside %d-%d bytes", r.Node, r.ChunkSize, minChunk, SwarmMaxChunk)
	}
	n := (r.Size + r.ChunkSize - 1) / r.ChunkSize
	if n > maxChunks {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: %d chunks of %d bytes is over the limit of %d chunks; use a larger chunk_size", r.Node, n, r.ChunkSize, maxChunks)
	}
	chunks = int(n)
	if len(r.Have) > (chunks+7)/8 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: have is %d bytes; %d chunks need at most %d", r.Node, len(r.Have), chunks, (chunks+7)/8)
	}
	if len(r.Have) == (chunks+7)/8 && chunks%8 != 0 && r.Have[len(r.Have)-1]>>(chunks%8) != 0 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: have marks chunks beyond the last (%d)", r.Node, chunks-1)
	}
	for i, s := range r.Sums {
		if i < 0 || i >= chunks {
			return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: sums has chunk %d; the file has chunks 0-%d", r.Node, i, chunks-1)
		}
		if !validDigest(s) {
			return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: sums[%d] is not 64 lowercase hex digits", r.Node, i)
		}
	}
	if len(r.Bad) > 64 || len(r.Unreachable) > 64 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: more than 64 bad or unreachable peers", r.Node)
	}
	if len(r.Validator) > 1024 {
		return 0, api.Errorf(api.CodeInvalid, "swarm report from %s: validator is over 1024 bytes", r.Node)
	}
	return chunks, nil
}

func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == toLowerHex(s)
}

func toLowerHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'F' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func countBits(b []byte) int {
	n := 0
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return n
}

// postSwarm answers POST /v1/swarm.
func (s *Server) postSwarm(w http.ResponseWriter, r *http.Request) error {
	var rep api.SwarmReport
	if err := decode(w, r, MaxReportBytes, "swarm report", &rep); err != nil {
		return err
	}
	chunks, err := validSwarmReport(&rep, s.cfg.SwarmMinChunk)
	if err != nil {
		return err
	}
	if err := s.speaksFor(r, rep.Node); err != nil {
		return err
	}
	// The fabric is the coordinator's own record of the node, never the
	// request's word: a node that could name its fabric could join
	// another fabric's swarm and be offered as its peer.
	s.view.mu.RLock()
	vn := s.view.nodes[rep.Node]
	fabric := ""
	if vn != nil {
		fabric = vn.Fabric
	}
	s.view.mu.RUnlock()
	if vn == nil {
		return api.Errorf(api.CodeConflict, "node %s has not reported yet; its agent must report (POST /v1/reports) before it joins a swarm", rep.Node)
	}
	if fabric == "" {
		fabric = DefaultFabric
	}
	plan, wait, err := s.swarms.report(s, fabric, &rep, chunks, s.now())
	if err != nil {
		return err
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
		if plan, _, err = s.swarms.report(s, fabric, &rep, chunks, s.now()); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}

// report applies one member's report to its swarm and returns its plan,
// and, when the member asked to wait (WaitMs) and the plan gives it nothing
// to do, a channel closed when the swarm next changes.
func (sw *swarms) report(s *Server, fabric string, rep *api.SwarmReport, chunks int, now time.Time) (api.SwarmPlan, <-chan struct{}, error) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.expire(s, now)
	key := swarmKey{fabric, rep.Source, rep.SHA256}
	g := sw.m[key]
	if g == nil {
		if rep.Gone {
			return api.SwarmPlan{ChunkSize: rep.ChunkSize, Sums: []string{}, Peers: []api.SwarmPeer{},
				ReportEvery: int(s.cfg.SwarmReportEvery / time.Millisecond)}, nil, nil
		}
		if len(sw.m) >= maxSwarms {
			return api.SwarmPlan{}, nil, api.Errorf(api.CodeUnavailable, "the coordinator holds %d swarms, its limit; fetch from the origin or retry later", maxSwarms)
		}
		g = &swarm{key: key, size: rep.Size, chunkSize: rep.ChunkSize, chunks: chunks,
			sums: map[int]string{}, sumFrom: map[int]int{}, members: map[string]*swarmMember{},
			badBy: map[string]map[string]bool{}}
	} else if rep.Size != g.size {
		return api.SwarmPlan{}, nil, api.Errorf(api.CodeInvalid, "swarm report from %s: size_bytes %d differs from the swarm's %d for the same sha256", rep.Node, rep.Size, g.size)
	}
	m := g.members[rep.Node]
	if m == nil || m.gone {
		if !rep.Gone && m == nil && sw.memberships(rep.Node) >= swarmsPerNode {
			return api.SwarmPlan{}, nil, api.Errorf(api.CodeInvalid, "node %s is already in %d swarms, the limit; finish or leave one (gone) first", rep.Node, swarmsPerNode)
		}
	}
	if m == nil {
		m = &swarmMember{node: rep.Node, bad: map[string]bool{}, unreach: map[string]time.Time{}}
		g.members[rep.Node] = m
	}
	sw.m[key] = g
	g.last = now
	// What a waiting member may act on, before this report: compared at
	// the end, a change wakes the waiters.
	sums0, holder0, verified0 := len(g.sums), g.holder, m.verified
	log := s.log.WithFields(logrus.Fields{"fabric": fabric, "source": rep.Source, "node": rep.Node})

	// Only a chunk size the swarm agrees on makes chunk indexes mean the
	// same bytes; the first member's is the swarm's, and the plan says so.
	if rep.ChunkSize == g.chunkSize {
		// A new slice, never the old one rewritten: plans handed out
		// earlier still reference the old one while they are encoded,
		// after sw.mu is released.
		m.have = append([]byte(nil), rep.Have...)
		m.verified = countBits(m.have)
	}
	m.complete = rep.Complete
	if m.complete {
		m.verified = g.chunks
	}
	if g.holder == rep.Node && rep.FromOrigin > m.fromOrig {
		// The holder read from the origin since its last report.
		g.progressAt = now
	}

	m.last = now
	if d := rep.FromOrigin - m.fromOrig; d > 0 {
		g.fromOrigin += d
		sw.bytes.add(fabric, d, 0)
	}
	if d := rep.FromPeers - m.fromPeers; d > 0 {
		g.fromPeers += d
		sw.bytes.add(fabric, 0, d)
	}
	m.fromOrig, m.fromPeers = rep.FromOrigin, rep.FromPeers

	// Accusations count only against members of this swarm: a name that is
	// not one costs nothing to keep.
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

	if rep.Gone {
		if g.holder == rep.Node {
			sw.passLease(s, g, now, "gone")
		}
		if !rep.Complete {
			sw.dropMember(g, rep.Node)
		} else {
			m.gone = true
		}
	}

	// The holder's lease ends when it has been silent too long, or sooner
	// when a member could not reach it and it has been silent a little:
	// a killed seed must not stall its fabric for the whole timeout.
	if h := g.members[g.holder]; h != nil && h != m {
		silent := now.Sub(h.last)
		dead := false
		if silent >= deadHolderSilence {
			for _, o := range g.members {
				if t, ok := o.unreach[h.node]; ok && o != h && t.After(h.last) {
					dead = true
				}
			}
		}
		switch {
		case silent >= s.cfg.SwarmLeaseTimeout:
			sw.passLease(s, g, now, fmt.Sprintf("silent %v", silent.Round(time.Millisecond)))
		case dead:
			sw.passLease(s, g, now, fmt.Sprintf("unreachable and silent %v", silent.Round(time.Millisecond)))
		}
	}
	// Reporting is not progress: a holder whose origin read is stuck (an
	// origin that stopped sending, a request that keeps failing) loses the
	// lease after the same timeout as a silent one.
	if g.holder != "" && now.Sub(g.progressAt) >= s.cfg.SwarmLeaseTimeout {
		sw.passLease(s, g, now, fmt.Sprintf("no origin progress for %v", now.Sub(g.progressAt).Round(time.Millisecond)))
	}

	// The lease: at most one holder; the heir, for successorWait, or the
	// first to ask after. A complete member needs no origin.
	if g.holder == "" && !rep.Gone && !m.complete &&
		(g.heir == "" || g.heir == rep.Node || !now.Before(g.heirUntil)) {
		g.holder, g.heir = rep.Node, ""
		g.progressAt = now
		g.leaseChanges++
		log.Info("swarm: origin lease taken")
	}
	if g.holder == rep.Node && g.validator == "" && rep.Validator != "" {
		g.validator = rep.Validator
	}

	known := sw.takeSums(g, m, rep, log)

	plan := api.SwarmPlan{
		Lease:       g.holder == rep.Node,
		Holder:      g.holder,
		ChunkSize:   g.chunkSize,
		Sums:        make([]string, g.chunks),
		SumsKnown:   known,
		Peers:       []api.SwarmPeer{},
		Validator:   g.validator,
		ReportEvery: int(s.cfg.SwarmReportEvery / time.Millisecond),
	}
	for i, d := range g.sums {
		plan.Sums[i] = d
	}
	if !rep.Gone {
		plan.Peers = sw.peers(s, g, m, now)
	}
	if len(g.sums) != sums0 || g.holder != holder0 || m.verified > verified0 || rep.Gone {
		g.notify()
	}
	if rep.WaitMs > 0 && !rep.Gone && idle(m, plan) {
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		m.waitUntil = now.Add(min(time.Duration(rep.WaitMs)*time.Millisecond, maxSwarmWait))
		return plan, g.changed, nil
	}
	return plan, nil, nil
}

// takeSums stores the chunk digests rep may give and returns how many of
// them are now stored. A lease holder's digests fill unknown chunks and
// replace an earlier holder's (the earlier holder may have read other bytes,
// and every member checks the whole file against the pin anyway, so the
// newest reader of the origin is trusted over a gone one); a complete
// member's replace any other, since it verified the whole file, and no
// holder's replace those.
func (sw *swarms) takeSums(g *swarm, m *swarmMember, rep *api.SwarmReport, log *logrus.Entry) int {
	from := 0
	switch {
	case m.complete:
		from = sumFromComplete
	case g.holder == m.node:
		from = sumFromHolder
	default:
		return 0
	}
	known := 0
	for i, d := range rep.Sums {
		old, had := g.sums[i]
		switch {
		case !had:
		case old == d:
		case g.sumFrom[i] > from:
			continue
		default:
			log.WithFields(logrus.Fields{"chunk": i, "stored": old, "now": d}).Warn("swarm: a chunk digest replaced")
		}
		g.sums[i], g.sumFrom[i] = d, max(from, g.sumFrom[i])
		known++
	}
	return known
}

// peers are the members of g (all of g's fabric) m may read from.
func (sw *swarms) peers(s *Server, g *swarm, m *swarmMember, now time.Time) []api.SwarmPeer {
	out := []api.SwarmPeer{}
	names := make([]string, 0, len(g.members))
	for n := range g.members {
		names = append(names, n)
	}
	sort.Strings(names)
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	for _, n := range names {
		p := g.members[n]
		if p == m || m.bad[n] || len(g.badBy[n]) >= badQuorum {
			continue
		}
		if t, ok := m.unreach[n]; ok && now.Sub(t) < unreachableFor {
			continue
		}
		addr := sw.peerAddr[n]
		vn := s.view.nodes[n]
		if addr == "" || vn == nil {
			continue
		}
		// Fabrics are not connected: a node that moved fabric since it
		// joined is nobody's peer here any more.
		if f := vn.Fabric; f != g.key.fabric && !(f == "" && g.key.fabric == DefaultFabric) {
			continue
		}
		if p.verified == 0 && !p.complete {
			continue
		}
		out = append(out, api.SwarmPeer{Node: n, Addr: addr, Have: p.have, Complete: p.complete})
	}
	return out
}

// passLease ends g's lease and keeps it for the live member furthest ahead.
func (sw *swarms) passLease(s *Server, g *swarm, now time.Time, why string) {
	old := g.holder
	g.holder = ""
	g.heir = ""
	best := -1
	recent := 2 * s.cfg.SwarmReportEvery
	for _, n := range sortedMembers(g) {
		p := g.members[n]
		// A member held in a wait (SwarmReport.WaitMs) last spoke up to
		// maxSwarmWait ago and is as live as one that just did.
		if n == old || p.gone || p.complete || (now.Sub(p.last) > recent && now.After(p.waitUntil)) {
			continue
		}
		if p.verified > best {
			best, g.heir = p.verified, n
		}
	}
	g.heirUntil = now.Add(successorWait)
	// The heir may be waiting for news; this is news.
	g.notify()
	s.log.WithFields(logrus.Fields{"fabric": g.key.fabric, "source": g.key.source, "node": old, "heir": g.heir}).
		Infof("swarm: origin lease released (%s)", why)
}

func sortedMembers(g *swarm) []string {
	names := make([]string, 0, len(g.members))
	for n := range g.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (sw *swarms) dropMember(g *swarm, node string) {
	delete(g.members, node)
	for _, o := range g.members {
		delete(o.bad, node)
		delete(o.unreach, node)
	}
	delete(g.badBy, node)
	for _, by := range g.badBy {
		delete(by, node)
	}
}

// memberships counts the swarms node is a live member of.
func (sw *swarms) memberships(node string) int {
	n := 0
	for _, g := range sw.m {
		if m := g.members[node]; m != nil && !m.gone {
			n++
		}
	}
	return n
}

// expire drops idle swarms, members silent past the lease timeout (their
// lease first), and complete members kept past their retention or whose node
// went stale. Called under sw.mu.
func (sw *swarms) expire(s *Server, now time.Time) {
	for k, g := range sw.m {
		if now.Sub(g.last) > swarmIdle {
			delete(sw.m, k)
			continue
		}
		for _, n := range sortedMembers(g) {
			m := g.members[n]
			silent := now.Sub(m.last)
			switch {
			case m.gone && silent > completeRetention:
			case m.gone && s.nodeStale(n, now):
			case !m.gone && silent > swarmIdle:
			default:
				continue
			}
			if g.holder == n {
				sw.passLease(s, g, now, "member expired")
			}
			sw.dropMember(g, n)
		}
		if len(g.members) == 0 {
			delete(sw.m, k)
		}
	}
}

// nodeStale says whether node has missed its reports (the coordinator's
// staleness rule) or is unknown.
func (s *Server) nodeStale(node string, now time.Time) bool {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	vn := s.view.nodes[node]
	return vn == nil || now.Sub(vn.Received) > s.staleAfter
}
