package agent

// Who a chunk server serves (issue 24): the members of the file's swarm as
// the coordinator's latest plan lists them, each from the addresses the
// coordinator binds its credentials to (api.SwarmPlan.Members). The
// requester's fabric header and node name are its own word; the
// credential's origin address is its munged's, and the plan is the
// coordinator's, which takes a node's fabric from Slurm.

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/llmgw/llmgw/api"
)

// swarmMembers is what a plan says of the members of a file's swarm.
type swarmMembers struct {
	// legacy: the plan came from a coordinator that lists no members (no
	// Instance either, from before issue 24): every requester of this
	// node's fabric is served, as then, so that agents may be upgraded
	// before their coordinator.
	legacy bool
	// bound: the coordinator binds members' credentials to addresses.
	bound bool
	addrs map[string][]netip.Addr
}

// refreshEvery is how often at most a chunk server asks the coordinator
// for a plan on behalf of requesters its latest plan does not list: a
// member that joined since waits at most this long, and a stranger with a
// root credential can make it ask four times a second, no more.
const refreshEvery = 250 * time.Millisecond

// setMembers keeps the members p lists, when it lists them.
func (h *held) setMembers(p api.SwarmPlan) {
	m := &swarmMembers{bound: p.AddrsBound, addrs: make(map[string][]netip.Addr, len(p.Members))}
	switch {
	case p.Instance == "":
		m.legacy = true
	case len(p.Members) == 0:
		// A plan for a member leaving, or refused, or one that left the
		// members out because this node holds them (the report's
		// MembersVersion): nothing new.
		return
	}
	for _, x := range p.Members {
		as := []netip.Addr{}
		for _, a := range x.Addrs {
			if ip, err := netip.ParseAddr(a); err == nil {
				as = append(as, ip.Unmap())
			}
		}
		m.addrs[x.Node] = as
	}
	h.mu.Lock()
	h.members, h.membersVersion = m, p.MembersVersion
	h.mu.Unlock()
}

// admits says whether the latest plan lists node as a member whose
// credentials may come from addr.
func (h *held) admits(node string, addr netip.Addr) bool {
	h.mu.Lock()
	m := h.members
	h.mu.Unlock()
	if m == nil {
		return false
	}
	if m.legacy {
		return true
	}
	as, ok := m.addrs[node]
	return ok && (!m.bound || slices.Contains(as, addr.Unmap()))
}

// admit is admits, after asking the coordinator for a fresh plan when the
// latest does not list node: a reader that joined the swarm since (one
// that has verified nothing yet, above all) must be served, and the plan
// of a node that finished its fetch is as old as its last report.
func (h *held) admit(ctx context.Context, node string, addr netip.Addr) bool {
	if h.admits(node, addr) {
		return true
	}
	if h.refresh == nil {
		return false
	}
	came := time.Now()
	h.refreshMu.Lock()
	defer h.refreshMu.Unlock()
	if h.refreshed.After(came) {
		// A plan asked for since this request came lists every member
		// that joined before it.
		return h.admits(node, addr)
	}
	if wait := refreshEvery - time.Since(h.refreshed); wait > 0 {
		if sleep(ctx, wait) != nil {
			return false
		}
	}
	h.refreshed = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := h.refresh(rctx); err != nil {
		return false
	}
	return h.admits(node, addr)
}

// heldPlan asks the coordinator for a plan of the swarm of a file this node
// holds whole outside a swarm fetch (holdComplete: found in the cache, or
// fetched by the Fetcher), for the members its chunk server may serve: the
// report says the node holds it complete. A node asked for it is listed as
// a peer already (a fetch that finished before the agent restarted); without
// this, a plan it never had left its chunk server refusing every reader.
func (a *Agent) heldPlan(ctx context.Context, sum string, h *held) error {
	h.mu.Lock()
	r := api.SwarmReport{Source: h.source, SHA256: sum, Size: h.size, ChunkSize: h.chunkSize, Complete: true, MembersVersion: h.membersVersion}
	h.mu.Unlock()
	cfg := a.Config()
	if r.Source == "" || cfg.Coordinator == "" {
		return errors.New("no coordinator to ask for the swarm's members")
	}
	r.Node = cfg.Node
	c, err := a.client(cfg)
	if err != nil {
		return err
	}
	p, err := c.Swarm(ctx, r)
	if err != nil {
		return err
	}
	h.setMembers(p)
	return nil
}
