package coordinator

import (
	"net/http"
	"strconv"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// MaxPlacementNodes bounds the candidates of one placement request: more
// than any partition, few enough that a hostlist like n[1-99999999] cannot
// make the coordinator build a list of a hundred million names.
const MaxPlacementNodes = 100_000

// SetSlurmStates records each node's Slurm state (sinfo %T) as read by the
// caller, replacing what was known; a node missing from states is unknown
// again, which counts as schedulable. The feature reconciler calls it each
// time it reads sinfo, so placement counts no DOWN or DRAINED node as a
// holder.
func (s *Server) SetSlurmStates(states map[string]string) { s.view.setSlurmStates(states) }

// Placement ranks candidate nodes for a job of count nodes that wants
// model, as of now. nodes are the candidates by name; none means every node
// the coordinator knows. A name no agent reported from is still a
// candidate: nothing is known of it, and that is said.
func (s *Server) Placement(model string, count int, nodes []string, now time.Time) (*api.Placement, bool) {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	i, ok := s.view.cat.Index(model)
	if !ok {
		return nil, false
	}
	m := s.view.cat.Models[i]
	var candidates []*placement.Node
	if len(nodes) == 0 {
		candidates = make([]*placement.Node, 0, len(s.view.names))
		for n := range s.view.all() {
			candidates = append(candidates, n)
		}
	} else {
		seen := make(map[string]bool, len(nodes))
		for _, name := range nodes {
			if seen[name] {
				continue
			}
			seen[name] = true
			if n := s.view.nodes[name]; n != nil {
				candidates = append(candidates, &n.Node)
			} else {
				candidates = append(candidates, &placement.Node{Name: name, SlurmState: s.view.slurm[name]})
			}
		}
	}
	req := placement.Request{
		Model: m, Count: count, Now: now, StaleAfter: s.staleAfter, StallAfter: s.cfg.StallAfter,
		FetchBytes: placement.FetchBytes(m, placement.LargestCopy(s.view.all(), m.Name, now, s.staleAfter)),
	}
	r := placement.Rank(req, candidates)
	byName := make(map[string]*placement.Node, len(candidates))
	for _, n := range candidates {
		byName[n.Name] = n
	}
	out := &api.Placement{Generated: now.UTC(), Model: m, Count: r.Count, FetchBytes: req.FetchBytes,
		Nodes: make([]api.PlacementNode, 0, len(r.Nodes)), Fabrics: make([]api.PlacementFabric, 0, len(r.Fabrics)),
		Choice: r.Choice, Note: r.Note}
	if out.Choice == nil {
		out.Choice = []string{}
	}
	for k, rn := range r.Nodes {
		n := byName[rn.Node]
		state := api.NodeUnreported
		if !n.Received.IsZero() {
			state = string(n.State(now, s.staleAfter))
		}
		pn := api.PlacementNode{
			Node: rn.Node, Fabric: rn.Fabric, Rank: k + 1, Tier: rn.Tier.String(), Usable: rn.Tier.Usable(),
			State: state, SlurmState: n.SlurmState, Holds: string(rn.Holds), Path: rn.Path, Holder: rn.Holder,
			NoRoom: rn.NoRoom(), Memory: apiCheck(rn.Memory), Disk: apiCheck(rn.Disk), Reason: rn.Reason,
		}
		if rn.Fetch != nil {
			if f := n.FindModelFetch(m); f != nil {
				fs := s.fetchStatus(n, *f, now)
				pn.Fetch = &fs
			}
		}
		out.Nodes = append(out.Nodes, pn)
	}
	for _, f := range r.Fabrics {
		out.Fabrics = append(out.Fabrics, api.PlacementFabric{Fabric: f.Fabric, Holders: f.Holders,
			LocalHolders: f.LocalHolders, Usable: f.Usable, Enough: f.Enough, Reason: f.Reason})
	}
	return out, true
}

func apiCheck(c placement.Check) api.PlacementCheck {
	return api.PlacementCheck{Result: string(c.Result), NeedBytes: c.Need, HaveBytes: c.Have, Reason: c.Reason}
}

// getPlacement answers GET /v1/placement?model=M[&count=N][&nodes=HOSTLIST].
func (s *Server) getPlacement(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	name := q.Get("model")
	if name == "" {
		return api.Errorf(api.CodeInvalid, "placement needs a model: GET /v1/placement?model=NAME")
	}
	if err := catalog.ValidModelName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	count := 1
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > MaxPlacementNodes {
			return api.Errorf(api.CodeInvalid, "count %q: want a number of nodes from 1 to %d", c, MaxPlacementNodes)
		}
		count = n
	}
	var nodes []string
	if list := q.Get("nodes"); list != "" {
		var err error
		if nodes, err = slurm.Expand(list); err != nil {
			return api.Errorf(api.CodeInvalid, "nodes %.80q: %v; give a Slurm hostlist such as n[1-4],gpu7", list, err)
		}
		if limit := s.placementLimit(); len(nodes) > limit {
			return api.Errorf(api.CodeInvalid, "nodes names %d nodes; this coordinator knows %d, so at most %d may be named (an answer is a row per node named)", len(nodes), limit-minPlacementLimit, limit)
		}
		for _, n := range nodes {
			if err := api.ValidNodeName(n); err != nil {
				return api.Errorf(api.CodeInvalid, "nodes: %v", err)
			}
		}
	}
	p, ok := s.Placement(name, count, nodes, s.now())
	if ok && q.Get("view") != "" {
		p.View = s.features.view()
	}
	if !ok {
		return api.Errorf(api.CodeNotFound, "model %s is not in the catalog; 'llmgw models list' shows it", name)
	}
	if !s.mayFetch(r) {
		redactPlacement(p)
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// minPlacementLimit is how many names beyond the nodes it knows a
// placement request may give: a few nodes not yet heard from (a new rack,
// a coordinator just started) are candidates as the rest are.
const minPlacementLimit = 64

// placementLimit is the most node names one placement request may give:
// the nodes the coordinator knows (from reports or Slurm's list) and
// minPlacementLimit more. Every name is a row of the answer, and
// n[0-99999] made one answer 50 MB; beyond the cluster there is nothing to
// rank.
func (s *Server) placementLimit() int {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	known := len(s.view.nodes)
	for name := range s.view.slurm {
		if _, ok := s.view.nodes[name]; !ok {
			known++
		}
	}
	return min(known+minPlacementLimit, MaxPlacementNodes)
}
