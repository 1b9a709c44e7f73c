package coordinator

import (
	"cmp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/api"
)

// What an admin sees of the swarms (swarm.go): a snapshot for status, and
// per-fabric figures for /metrics. Kept apart from swarm.go, which holds the
// lease rules: this file only reads the registry, under its lock, and never
// takes the view's lock while holding it (report takes the swarm lock, then
// the view's; status and the metrics read the swarms first, then the view).

// maxTrafficFabrics bounds the per-fabric byte totals: fabrics come from
// node reports, so a node could name new ones; past this many, the rest are
// added up under otherFabric.
const maxTrafficFabrics = 1024

// fabricTraffic is the bytes swarm members received, per fabric, from the
// origin and from peers, since the coordinator started: the sum of the
// increments of their reports. Swarms are dropped when idle; these totals
// are not. Guarded by swarms.mu.
type fabricTraffic struct {
	m map[string]*[2]int64 // [0] from the origin, [1] from peers
}

// add counts a member's increments in fabric. Called under swarms.mu.
func (t *fabricTraffic) add(fabric string, origin, peers int64) {
	if t.m == nil {
		t.m = map[string]*[2]int64{}
	}
	c := t.m[fabric]
	if c == nil {
		if len(t.m) >= maxTrafficFabrics {
			fabric = otherFabric
			c = t.m[fabric]
		}
		if c == nil {
			c = &[2]int64{}
			t.m[fabric] = c
		}
	}
	c[0] += origin
	c[1] += peers
}

// servesPeers says whether node reported a chunk server address, so that
// its fabric's members are offered it as a peer.
func (s *Server) servesPeers(node string) bool {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	vn := s.view.nodes[node]
	return vn != nil && vn.peerAddr != ""
}

// snapshot returns every swarm not yet idle as of now, by fabric, source
// and digest, with Model left empty (the caller names it from the catalog).
func (sw *swarms) snapshot(now time.Time) []api.SwarmStatus {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	out := make([]api.SwarmStatus, 0, len(sw.m))
	for _, g := range sw.m {
		if now.Sub(g.last) > swarmIdle {
			continue // the next sweep drops it (swarmexpire.go)
		}
		st := api.SwarmStatus{Fabric: g.key.fabric, Source: g.key.source, SHA256: g.key.sha, Size: g.size, Chunks: g.chunks,
			Holder: g.holder, LeaseChanges: g.leaseChanges, FromOrigin: g.fromOrigin, FromPeers: g.fromPeers,
			Idle: round(now.Sub(g.last).Seconds()), Recorded: g.recorded, Frozen: g.frozen()}
		for n := range g.refuted {
			st.Refuted = append(st.Refuted, n)
		}
		slices.SortFunc(st.Refuted, nodeCmpFunc)
		for n := range g.revoked {
			st.LeaseRevoked = append(st.LeaseRevoked, n)
		}
		slices.SortFunc(st.LeaseRevoked, nodeCmpFunc)
		unreach := map[string]bool{}
		for _, m := range g.members {
			if !m.gone {
				st.Members++
			}
			if m.complete {
				st.Complete++
			}
			for p, t := range m.unreach {
				if now.Sub(t) < unreachableFor && g.members[p] != nil {
					unreach[p] = true
				}
			}
		}
		for p := range unreach {
			st.Unreachable = append(st.Unreachable, p)
		}
		slices.SortFunc(st.Unreachable, nodeCmpFunc)
		for p, by := range g.badBy {
			if len(by) == 0 {
				continue
			}
			b := api.SwarmBadPeer{Peer: p, Dropped: len(by) >= badQuorum}
			for n := range by {
				b.By = append(b.By, n)
			}
			slices.SortFunc(b.By, nodeCmpFunc)
			st.Bad = append(st.Bad, b)
		}
		slices.SortFunc(st.Bad, func(a, b api.SwarmBadPeer) int { return nodeCmpFunc(a.Peer, b.Peer) })
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b api.SwarmStatus) int {
		return cmp.Or(cmp.Compare(a.Fabric, b.Fabric), cmp.Compare(a.Source, b.Source), cmp.Compare(a.SHA256, b.SHA256))
	})
	return out
}

// traffic returns a copy of the per-fabric byte totals.
func (sw *swarms) traffic() map[string][2]int64 {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	out := make(map[string][2]int64, len(sw.bytes.m))
	for f, c := range sw.bytes.m {
		out[f] = *c
	}
	return out
}

// fabricBytes is the per-fabric byte totals as status shows them, by
// fabric name.
func (sw *swarms) fabricBytes() []api.FabricSwarmBytes {
	t := sw.traffic()
	if len(t) == 0 {
		return nil
	}
	out := make([]api.FabricSwarmBytes, 0, len(t))
	for f, b := range t {
		out = append(out, api.FabricSwarmBytes{Fabric: f, FromOrigin: b[0], FromPeers: b[1]})
	}
	slices.SortFunc(out, func(a, b api.FabricSwarmBytes) int { return cmp.Compare(a.Fabric, b.Fabric) })
	return out
}

// nameSwarms is the swarms as status shows them, each named by the catalog
// model whose file it fetches. The caller holds s.view.mu (read) and took
// snap before it.
func (s *Server) nameSwarms(snap []api.SwarmStatus) []api.SwarmStatus {
	if len(snap) == 0 {
		return nil
	}
	bySource := map[string]string{}
	for _, m := range s.view.cat.Models {
		bySource[m.Source] = m.Name
		for _, f := range m.Files {
			bySource[f.Source] = m.Name
		}
	}
	for i := range snap {
		snap[i].Model = bySource[snap[i].Source]
	}
	return snap
}

var (
	swarmsDesc = prometheus.NewDesc("llmgw_coordinator_swarms",
		"Swarms (nodes of a fabric fetching one source through their peers) the coordinator keeps, per fabric.",
		[]string{"fabric"}, nil)
	leaseHoldersDesc = prometheus.NewDesc("llmgw_coordinator_swarm_lease_holders",
		"Swarms whose origin lease a node holds, per fabric: the nodes reading the origin for their fabric now.",
		[]string{"fabric"}, nil)
	swarmBytesDesc = prometheus.NewDesc("llmgw_coordinator_swarm_received_bytes_total",
		"Bytes swarm members reported receiving, per fabric and from where (origin or peers), since the coordinator started; from=\"origin\" over the sum is the share the site's uplink carried.",
		[]string{"fabric", "from"}, nil)
	// The liars' series (issue 24): status names the nodes; these count
	// them per fabric, for an alert (no node label: nodes are unbounded).
	swarmRefutedDesc = prometheus.NewDesc("llmgw_coordinator_swarm_refuted_members",
		"Members of the swarms kept now whose chunk digests lost to other readers', contradict the recorded list or made a member's file fail the pin, per fabric (summed over swarms; status names them).",
		[]string{"fabric"}, nil)
	swarmFrozenDesc = prometheus.NewDesc("llmgw_coordinator_swarm_frozen_chunks",
		"Chunks of the swarms kept now that two origin readers gave different digests for, none published until a second read agrees, per fabric.",
		[]string{"fabric"}, nil)
	swarmAccusedDesc = prometheus.NewDesc("llmgw_coordinator_swarm_accused_peers",
		"Peers members of the swarms kept now reported, per fabric and why: bad (sent a chunk that did not match its digest) or unreachable (refused, stalled or did not answer, lately); summed over swarms, status names them.",
		[]string{"fabric", "why"}, nil)
	swarmRevokedDesc = prometheus.NewDesc("llmgw_coordinator_swarm_lease_revoked_members",
		"Members of the swarms kept now that lost the origin lease for what they did (no evidence of reading, bad chunks, false digests), not for silence, per fabric.",
		[]string{"fabric"}, nil)
)

// swarmCollector turns the swarm registry into per-fabric series at scrape
// time, with the fabric label bounded as every other (fabricLabels).
type swarmCollector struct{ s *Server }

func (c *swarmCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- swarmsDesc
	ch <- leaseHoldersDesc
	ch <- swarmBytesDesc
	ch <- swarmRefutedDesc
	ch <- swarmFrozenDesc
	ch <- swarmAccusedDesc
	ch <- swarmRevokedDesc
}

func (c *swarmCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	// The swarm lock first and alone, then the view's: report takes them
	// in that order, nested.
	now := s.now()
	snap := s.swarms.snapshot(now)
	traffic := s.swarms.traffic()
	s.view.mu.RLock()
	labels := s.fabricLabels()
	s.view.mu.RUnlock()
	label := func(f string) string {
		if l, ok := labels[f]; ok {
			return l
		}
		return otherFabric
	}
	// Every labelled fabric, zeros included: "no lease holder in ib-b" and
	// a rate() from the first scrape need the series to exist.
	count := map[string]*[2]int{}
	bytes := map[string]*[2]int64{}
	// liars: refuted members, frozen chunks, bad and unreachable peers,
	// revoked leases.
	liars := map[string]*[5]int{}
	for _, l := range labels {
		count[l], bytes[l], liars[l] = &[2]int{}, &[2]int64{}, &[5]int{}
	}
	for _, g := range snap {
		l := label(g.Fabric)
		if count[l] == nil {
			count[l], liars[l] = &[2]int{}, &[5]int{}
		}
		count[l][0]++
		if g.Holder != "" {
			count[l][1]++
		}
		liars[l][0] += len(g.Refuted)
		liars[l][1] += g.Frozen
		liars[l][2] += len(g.Bad)
		liars[l][3] += len(g.Unreachable)
		liars[l][4] += len(g.LeaseRevoked)
	}
	for l, n := range liars {
		ch <- prometheus.MustNewConstMetric(swarmRefutedDesc, prometheus.GaugeValue, float64(n[0]), l)
		ch <- prometheus.MustNewConstMetric(swarmFrozenDesc, prometheus.GaugeValue, float64(n[1]), l)
		ch <- prometheus.MustNewConstMetric(swarmAccusedDesc, prometheus.GaugeValue, float64(n[2]), l, "bad")
		ch <- prometheus.MustNewConstMetric(swarmAccusedDesc, prometheus.GaugeValue, float64(n[3]), l, "unreachable")
		ch <- prometheus.MustNewConstMetric(swarmRevokedDesc, prometheus.GaugeValue, float64(n[4]), l)
	}
	for f, b := range traffic {
		l := label(f)
		if bytes[l] == nil {
			bytes[l] = &[2]int64{}
		}
		bytes[l][0] += b[0]
		bytes[l][1] += b[1]
	}
	for l, n := range count {
		ch <- prometheus.MustNewConstMetric(swarmsDesc, prometheus.GaugeValue, float64(n[0]), l)
		ch <- prometheus.MustNewConstMetric(leaseHoldersDesc, prometheus.GaugeValue, float64(n[1]), l)
	}
	for l, b := range bytes {
		ch <- prometheus.MustNewConstMetric(swarmBytesDesc, prometheus.CounterValue, float64(b[0]), l, "origin")
		ch <- prometheus.MustNewConstMetric(swarmBytesDesc, prometheus.CounterValue, float64(b[1]), l, "peers")
	}
}
