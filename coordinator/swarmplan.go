package coordinator

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/llmgw/llmgw/api"
)

// What a member is told: the lease, the digests, the peers of its own
// fabric it may read from, and every member of its fabric's swarm with the
// addresses its chunk server checks requests against (api.SwarmPlan).

// plan is m's plan of g, answering rep; known is how many of its digests
// are published (SumsKnown). A member leaving is told no peers; one that
// holds the members' list as it is now is not sent it again.
func (sw *swarms) plan(s *Server, g *swarm, m *swarmMember, known int, rep *api.SwarmReport, now time.Time) api.SwarmPlan {
	plan := api.SwarmPlan{
		Lease:     g.holder == m.node,
		Holder:    g.holder,
		ChunkSize: g.chunkSize,
		// A copy: the plan is encoded after sw.mu is released, and the
		// swarm's list changes in place.
		Sums:        slices.Clone(g.sums),
		SumsKnown:   known,
		Peers:       []api.SwarmPeer{},
		Validator:   g.validator,
		ReportEvery: int(s.cfg.SwarmReportEvery / time.Millisecond),
		Instance:    s.instance,
		Recorded:    g.recorded,
		AddrsBound:  s.known != nil,
	}
	if !rep.Gone {
		plan.Peers, plan.Members = sw.peers(s, g, m, now)
		plan.MembersVersion = membersVersion(plan.Members)
		if rep.MembersVersion == plan.MembersVersion {
			// Issue 24 (3e): 1,000 members are 42 KB of every plan, four
			// plans a second a member (BenchmarkSwarmPlanMembers).
			plan.Members = nil
		}
	}
	return plan
}

// membersVersion names a members' list by its content (FNV-1a over each
// node and its addresses, in the list's order), never 0: the same list
// has the same version in every plan, across restarts too, and a member
// that holds it is not sent it again.
func membersVersion(ms []api.SwarmMember) uint64 {
	h := fnv.New64a()
	for _, m := range ms {
		h.Write([]byte(m.Node))
		for _, a := range m.Addrs {
			h.Write([]byte{0})
			h.Write([]byte(a))
		}
		h.Write([]byte{'\n'})
	}
	return max(h.Sum64(), 1)
}

// peers are the members of g (all of g's fabric) m may read from, and
// every member of g as a chunk server checks it.
func (sw *swarms) peers(s *Server, g *swarm, m *swarmMember, now time.Time) ([]api.SwarmPeer, []api.SwarmMember) {
	peers := []api.SwarmPeer{}
	members := make([]api.SwarmMember, 0, len(g.names))
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	for _, n := range g.names {
		p := g.members[n]
		vn := s.view.nodes[n]
		// Fabrics are not connected: a node that moved fabric since it
		// joined is nobody's peer here any more, nor served.
		if vn == nil {
			continue
		}
		if f := vn.Fabric; f != g.key.fabric && !(f == "" && g.key.fabric == DefaultFabric) {
			continue
		}
		members = append(members, api.SwarmMember{Node: n, Addrs: p.addrs})
		if p == m || m.bad[n] || len(g.badBy[n]) >= badQuorum || g.forged[n] {
			continue
		}
		if t, ok := m.unreach[n]; ok && now.Sub(t) < unreachableFor {
			continue
		}
		addr := vn.peerAddr
		if addr == "" {
			continue
		}
		// The lease holder is listed before it has verified a chunk: a
		// member caught up with it probes it, so a seed that dies before
		// its first chunk is found as soon as one that dies later
		// (issue 24: 5 s against 0.6-1 s before).
		if p.verified == 0 && !p.complete && n != g.holder {
			continue
		}
		peers = append(peers, api.SwarmPeer{Node: n, Addr: addr, Have: p.have, Complete: p.complete})
	}
	return peers, members
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
