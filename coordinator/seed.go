package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Seeding on purpose (llmgw seed, issue 18). The coordinator reaches a node
// only in the answer to its report, as for gc; but where a gc request is
// handed once, a seed ask rides on every answer to the node until the node
// reports holding the model (its own report says so, nothing else) or the
// request's deadline passes. Asking again is harmless: the agent runs one
// seed per source at a time and ignores an ask for one under way, and the
// ask keeps coming after an agent restart that lost it. The asks are in the
// store too, so a coordinator restart does not lose them.

// Seed bounds: an admin script must not be able to grow the coordinator's
// memory or every report's answer without limit.
const (
	// maxPendingSeeds is how many seed requests may be asking at once.
	maxPendingSeeds = 64
	// seedAskForMax bounds how long a request may keep asking.
	seedAskForMax = 24 * time.Hour
)

// seedPending holds the seed requests still asking, in memory, so that a
// report costs one atomic load while there are none (nearly always).
type seedPending struct {
	n  atomic.Int32 // len(reqs)
	mu sync.Mutex
	// reqs are in creation order; each keeps the nodes still asked.
	reqs []*pendingSeed
}

type pendingSeed struct {
	id, model, fabric string
	copies            int
	created, deadline time.Time
	note              string
	// nodes are the nodes still asked, each with when it was first handed
	// the ask (zero: not yet).
	nodes map[string]time.Time
}

// seedTake is one ask for one node: the request, its model, and whether the
// node was handed it before.
type seedTake struct {
	id, model string
	handed    bool
}

func (p *seedPending) add(st api.SeedStatus) {
	ps := &pendingSeed{id: st.ID, model: st.Model, fabric: st.Fabric, copies: st.Copies, created: st.Created,
		deadline: st.Deadline, note: st.Note, nodes: map[string]time.Time{}}
	for _, n := range st.Nodes {
		if n.State == api.SeedAsked {
			ps.nodes[n.Node] = n.Handed
		}
	}
	if len(ps.nodes) == 0 {
		return
	}
	p.mu.Lock()
	p.reqs = append(p.reqs, ps)
	p.n.Store(int32(len(p.reqs)))
	p.mu.Unlock()
}

// count is how many requests are asking as of now.
func (p *seedPending) count(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked(now)
	return len(p.reqs)
}

// pruneLocked drops requests past their deadline or with no node left.
func (p *seedPending) pruneLocked(now time.Time) {
	keep := p.reqs[:0]
	for _, r := range p.reqs {
		if now.Before(r.deadline) && len(r.nodes) > 0 {
			keep = append(keep, r)
		}
	}
	clear(p.reqs[len(keep):])
	p.reqs = keep
	p.n.Store(int32(len(p.reqs)))
}

// forNode returns the asks still pending for node, oldest request first.
func (p *seedPending) forNode(node string, now time.Time) []seedTake {
	if p.n.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked(now)
	var out []seedTake
	for _, r := range p.reqs {
		if h, ok := r.nodes[node]; ok {
			out = append(out, seedTake{id: r.id, model: r.model, handed: !h.IsZero()})
		}
	}
	return out
}

// handed notes that request id first reached node at at.
func (p *seedPending) handed(id, node string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reqs {
		if h, ok := r.nodes[node]; r.id == id && ok && h.IsZero() {
			r.nodes[node] = at
		}
	}
}

// done stops asking node for request id; with node "" it stops the whole
// request.
func (p *seedPending) done(id, node string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reqs {
		if r.id != id {
			continue
		}
		if node == "" {
			clear(r.nodes)
		}
		delete(r.nodes, node)
	}
	p.pruneLocked(now)
}

// asking returns the requests still asking as of now, oldest first, each
// with only its nodes still asked, in name order.
func (p *seedPending) asking(now time.Time) []api.SeedStatus {
	if p.n.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneLocked(now)
	out := make([]api.SeedStatus, 0, len(p.reqs))
	for _, r := range p.reqs {
		st := api.SeedStatus{ID: r.id, Model: r.model, Fabric: r.fabric, Copies: r.copies, Created: r.created,
			Deadline: r.deadline, Note: r.note, Nodes: make([]api.SeedNode, 0, len(r.nodes))}
		for n, h := range r.nodes {
			st.Nodes = append(st.Nodes, api.SeedNode{Node: n, State: api.SeedAsked, Handed: h})
		}
		slices.SortFunc(st.Nodes, func(a, b api.SeedNode) int { return nodeCmpFunc(a.Node, b.Node) })
		out = append(out, st)
	}
	return out
}

func nodeCmpFunc(a, b string) int {
	switch {
	case placement.NodeLess(a, b):
		return -1
	case placement.NodeLess(b, a):
		return 1
	}
	return 0
}

// loadSeeds reads the requests a previous run of the coordinator was still
// asking with.
func (s *Server) loadSeeds(ctx context.Context) error {
	pend, err := s.db.PendingSeeds(ctx, s.now())
	if err != nil {
		return err
	}
	for _, st := range pend {
		s.seeds.add(st)
	}
	return nil
}

// seedNode is what the choice of nodes reads of one node of the fabric.
type seedNode struct {
	name                  string
	fresh, holds, asked   bool
	fetching, schedulable bool
	cacheDir              string
	free, total           int64
	age                   time.Duration
	// why is the reason the node cannot be asked, "" when it can.
	why string
}

func (s *Server) postSeed(w http.ResponseWriter, r *http.Request) error {
	var req api.SeedRequest
	if err := decode(w, r, MaxModelBytes, "seed request", &req); err != nil {
		return err
	}
	if err := catalog.ValidModelName(req.Model); err != nil {
		return api.Errorf(api.CodeInvalid, "seed request: %v", err)
	}
	if req.Fabric == "" {
		return api.Errorf(api.CodeInvalid, "seed request for %s names no fabric; name one (llmgw status lists them)", req.Model)
	}
	if err := api.ValidFabricName(req.Fabric); err != nil {
		return api.Errorf(api.CodeInvalid, "seed request: %v", err)
	}
	if req.Copies != 0 && req.Nodes != "" {
		return api.Errorf(api.CodeInvalid, "seed request for %s: give copies or nodes, not both", req.Model)
	}
	if req.Copies < 0 {
		return api.Errorf(api.CodeInvalid, "seed request for %s: copies is %d; it must be at least 1", req.Model, req.Copies)
	}
	askFor := api.SeedAskFor
	if req.AskFor != 0 {
		askFor = time.Duration(req.AskFor * float64(time.Second))
		if req.AskFor < 0 || askFor < time.Second || askFor > seedAskForMax {
			return api.Errorf(api.CodeInvalid, "seed request for %s: ask_for_seconds %g is outside 1-%d", req.Model, req.AskFor, int(seedAskForMax.Seconds()))
		}
	}
	var named []string
	if req.Nodes != "" {
		names, err := slurm.Expand(req.Nodes)
		if err != nil {
			return api.Errorf(api.CodeInvalid, "seed request for %s: nodes: %v", req.Model, err)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if err := api.ValidNodeName(n); err != nil {
				return api.Errorf(api.CodeInvalid, "seed request for %s: nodes: %v", req.Model, err)
			}
			if !seen[n] {
				seen[n] = true
				named = append(named, n)
			}
		}
	}
	now := s.now().UTC()
	if s.seeds.count(now) >= maxPendingSeeds {
		return api.Errorf(api.CodeConflict, "%d seed requests are asking nodes already, the limit; wait for one to finish ('llmgw status' lists them)", maxPendingSeeds)
	}

	m, nodes, fabrics, err := s.seedCandidates(req.Model, req.Fabric, now)
	if err != nil {
		return err
	}
	if err := seedable(m); err != nil {
		return err
	}
	if len(nodes) == 0 {
		return api.Errorf(api.CodeNotFound, "fabric %s has no node that reported to the coordinator; fabrics known: %s", req.Fabric, strings.Join(fabrics, ", "))
	}
	s.checkSlurm(r.Context(), nodes)

	st := api.SeedStatus{ID: uuid.NewString(), Model: m.Name, Fabric: req.Fabric, Created: now, Deadline: now.Add(askFor), Nodes: []api.SeedNode{}}
	var chosen []*seedNode
	if named != nil {
		chosen, err = chooseNamed(m, req.Fabric, nodes, named)
		st.Copies = len(chosen)
	} else {
		st.Copies = max(req.Copies, 1)
		chosen, err = chooseCopies(m, req.Fabric, nodes, st.Copies)
	}
	if err != nil {
		return err
	}
	var noPeers []string
	for _, n := range chosen {
		state := api.SeedAsked
		if n.holds {
			state = api.SeedHeld
		} else if !s.servesPeers(n.name) {
			noPeers = append(noPeers, n.name)
		}
		st.Nodes = append(st.Nodes, api.SeedNode{Node: n.name, State: state})
	}
	slices.SortFunc(st.Nodes, func(a, b api.SeedNode) int { return nodeCmpFunc(a.Node, b.Node) })
	st.Note = seedNote(m, noPeers)

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	if err := s.db.CreateSeed(ctx, st); err != nil {
		s.metrics.dbErrors.WithLabelValues("seed").Inc()
		return api.Errorf(api.CodeUnavailable, "the seed request could not be stored (database: %v)", err)
	}
	s.seeds.add(st)
	asked := 0
	for _, n := range st.Nodes {
		if n.State == api.SeedAsked {
			asked++
		}
	}
	s.log.WithFields(map[string]any{"seed": st.ID, "model": st.Model, "fabric": st.Fabric, "copies": st.Copies, "asked": asked}).Info("seed requested")
	writeJSON(w, http.StatusCreated, st)
	return nil
}

// seedable says why model m cannot be seeded, or nil: only a model the
// agents fetch can be, and a model of several files not yet (a seed ask
// names one source, which would land outside the model's set directory).
func seedable(m catalog.Model) error {
	switch {
	case m.IsHub():
		return api.Errorf(api.CodeInvalid, "model %s is Hugging Face repository %s; seeding a repository is not built yet (a seed ask fetches one file): a job's Prolog fetches it on each node", m.Name, m.Hub.Repo)
	case m.IsSet():
		return api.Errorf(api.CodeInvalid, "model %s is made of %d files; seeding a model of several files is not built yet (a seed ask fetches one file)", m.Name, len(m.Files))
	case catalog.KindOf(m.Source) == catalog.KindPath:
		return api.Errorf(api.CodeInvalid, "model %s is a path (%s) that nodes see or not; it is never fetched, so there is nothing to seed", m.Name, m.Source)
	case catalog.KindOf(m.Source) != catalog.KindRemote:
		return api.Errorf(api.CodeInvalid, "model %s is a model id the engine resolves itself; llmgw never fetches it, so there is nothing to seed", m.Name)
	}
	return nil
}

// seedNote says what makes this seed cost more than one origin read for
// the fabric, or "".
func seedNote(m catalog.Model, noPeers []string) string {
	var parts []string
	var missing []string
	if m.WantSHA256() == "" {
		missing = append(missing, "pinned sha256")
	}
	if m.Size <= 0 {
		missing = append(missing, "size")
	}
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("%s has no %s, which a swarm verifies every chunk against: each node asked reads the origin; "+
			"give both (llmgw models add %s SOURCE --sha256 HEX --size BYTES) to read it once per fabric", m.Name, strings.Join(missing, " and "), m.Name))
	}
	if len(noPeers) > 0 {
		parts = append(parts, fmt.Sprintf("%s reported no chunk server address (peer_interface or peer_addr in agent.toml): such a node fetches from the origin itself and serves no peer",
			slurm.Compress(noPeers)))
	}
	return strings.Join(parts, "; ")
}

// seedCandidates reads, under the view's lock, the catalog entry and every
// node of fabric with what the choice needs. fabrics are the fabrics
// known, for the message when fabric is not one.
func (s *Server) seedCandidates(model, fabric string, now time.Time) (catalog.Model, []*seedNode, []string, error) {
	// The nodes earlier requests still ask for this model, read first: the
	// seed lock is never taken under the view's.
	asked := map[string]bool{}
	for _, st := range s.seeds.asking(now) {
		for _, sn := range st.Nodes {
			asked[sn.Node] = asked[sn.Node] || st.Model == model
		}
	}
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	i, ok := s.view.cat.Index(model)
	if !ok {
		return catalog.Model{}, nil, nil, api.Errorf(api.CodeNotFound, "model %s is not in the catalog; 'llmgw models list' shows it, 'llmgw models add' adds it", model)
	}
	m := s.view.cat.Models[i]
	known := map[string]bool{}
	var out []*seedNode
	for _, name := range s.view.names {
		vn := s.view.nodes[name]
		f := vn.Fabric
		if f == "" {
			f = DefaultFabric
		}
		known[f] = true
		if f != fabric {
			continue
		}
		n := &seedNode{name: name, fresh: vn.State(now, s.staleAfter) != placement.StateStale,
			schedulable: vn.Schedulable(), cacheDir: vn.cacheDir, free: vn.CacheFree, total: vn.CacheTotal,
			age: now.Sub(vn.Received), fetching: vn.FindModelFetch(m) != nil}
		n.holds = n.fresh && vn.Holding(m.Name).Hold != placement.HoldNone
		switch {
		case !n.fresh:
			n.why = fmt.Sprintf("no report for %s; its agent must be running to be asked", n.age.Round(time.Second))
		case n.holds:
		case n.cacheDir == "":
			n.why = "reports no fetch cache (cache_dir)"
		case n.total > 0 && m.Size > 0 && n.free < m.Size:
			n.why = fmt.Sprintf("%s free in its cache, the model is %s", catalog.FormatBytes(n.free), catalog.FormatBytes(m.Size))
		}
		out = append(out, n)
	}
	fabrics := make([]string, 0, len(known))
	for f := range known {
		fabrics = append(fabrics, f)
	}
	slices.Sort(fabrics)
	for _, n := range out {
		n.asked = asked[n.name]
	}
	return m, out, fabrics, nil
}

// checkSlurm marks the nodes Slurm does not list, when the coordinator
// knows Slurm's list: with munge, the list reports are checked against;
// else the one the feature reconciler read. A node Slurm does not know
// runs no job, so a copy there helps nobody.
func (s *Server) checkSlurm(ctx context.Context, nodes []*seedNode) {
	if s.trust != nil {
		for _, n := range nodes {
			if _, ok := s.trust.nodes.lookup(ctx, n.name); !ok && n.why == "" {
				n.why, n.holds = "not in Slurm's node list", false
			}
		}
		return
	}
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	if len(s.view.slurm) == 0 {
		return
	}
	for _, n := range nodes {
		if _, ok := s.view.slurm[n.name]; !ok && n.why == "" {
			n.why, n.holds = "not in Slurm's node list", false
		}
	}
}

// chooseNamed checks the nodes an admin named: each must be a node of
// fabric the coordinator knows, and hold the model or be able to fetch it.
func chooseNamed(m catalog.Model, fabric string, nodes []*seedNode, named []string) ([]*seedNode, error) {
	by := make(map[string]*seedNode, len(nodes))
	for _, n := range nodes {
		by[n.name] = n
	}
	var out []*seedNode
	var bad []string
	for _, name := range named {
		n := by[name]
		switch {
		case n == nil:
			bad = append(bad, name+": not a node of fabric "+fabric+" that reported to the coordinator ('llmgw status "+m.Name+"' lists each node with its fabric)")
		case n.why != "":
			bad = append(bad, name+": "+n.why)
		default:
			out = append(out, n)
		}
	}
	if len(bad) > 0 {
		return nil, api.Errorf(api.CodeConflict, "cannot seed %s on %s: %s", m.Name, plural(len(bad), "node"), clipList(bad))
	}
	return out, nil
}

// chooseCopies picks k nodes of the fabric: the fresh holders first (they
// count), then the nodes that can fetch it, preferring those already asked
// by an earlier request or fetching it, then those Slurm would run jobs on,
// then the most cache room.
func chooseCopies(m catalog.Model, fabric string, nodes []*seedNode, k int) ([]*seedNode, error) {
	if k > len(nodes) {
		return nil, api.Errorf(api.CodeInvalid, "fabric %s has %s; copies must be 1-%d", fabric, plural(len(nodes), "node"), len(nodes))
	}
	var holders, can []*seedNode
	var cannot []string
	for _, n := range nodes {
		switch {
		case n.holds:
			holders = append(holders, n)
		case n.why == "":
			can = append(can, n)
		default:
			cannot = append(cannot, n.name+": "+n.why)
		}
	}
	if len(holders) >= k {
		return holders[:k], nil
	}
	if len(holders)+len(can) < k {
		return nil, api.Errorf(api.CodeConflict, "fabric %s cannot hold %d copies of %s: %d of its nodes hold it and %d can fetch it; %s; ask for fewer copies, or make room",
			fabric, k, m.Name, len(holders), len(can), clipList(cannot))
	}
	known := func(n *seedNode) int {
		if n.total > 0 {
			return 0
		}
		return 1
	}
	b2i := func(b bool) int {
		if b {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(can, func(a, b *seedNode) int {
		return cmp.Or(cmp.Compare(b2i(a.asked), b2i(b.asked)), cmp.Compare(b2i(a.fetching), b2i(b.fetching)),
			cmp.Compare(b2i(a.schedulable), b2i(b.schedulable)), cmp.Compare(known(a), known(b)),
			cmp.Compare(b.free, a.free))
	})
	return append(holders, can[:k-len(holders)]...), nil
}

// clipList joins reasons, at most a few of them, for one error message.
func clipList(items []string) string {
	const show = 8
	if len(items) > show {
		return strings.Join(items[:show], "; ") + fmt.Sprintf("; and %d more", len(items)-show)
	}
	return strings.Join(items, "; ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// seedAsks is what to ask node in the answer to the report just stored:
// every pending seed ask for a model it does not yet hold. An ask for a
// model it now reports holding is done, and stops; the view already has
// this report, so "holds" is the node's own latest word.
func (s *Server) seedAsks(ctx context.Context, node string) []api.SeedAsk {
	now := s.now().UTC()
	takes := s.seeds.forNode(node, now)
	if len(takes) == 0 {
		return nil
	}
	type verdict struct {
		take seedTake
		ask  *api.SeedAsk
		gone bool // the model left the catalog
	}
	vs := make([]verdict, len(takes))
	s.view.mu.RLock()
	vn := s.view.nodes[node]
	for i, t := range takes {
		vs[i].take = t
		mi, ok := s.view.cat.Index(t.model)
		if !ok {
			vs[i].gone = true
			continue
		}
		m := s.view.cat.Models[mi]
		if vn != nil && vn.Holding(m.Name).Hold != placement.HoldNone {
			continue
		}
		vs[i].ask = &api.SeedAsk{Model: m.Name, Source: m.Source, SHA256: m.WantSHA256(), Size: m.Size}
	}
	s.view.mu.RUnlock()

	// The ask is settled: its records must not be cut short by the agent
	// hanging up. The timer is made only here, not for every report.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var out []api.SeedAsk
	seen := map[string]bool{}
	for _, v := range vs {
		log := s.log.WithFields(map[string]any{"seed": v.take.id, "node": node, "model": v.take.model})
		switch {
		case v.gone:
			log.Warn("seed: the model left the catalog; the request stops asking")
			s.seeds.done(v.take.id, "", now)
		case v.ask == nil:
			// Asking stops whether or not the record is written: the node
			// holds it, and its status says so.
			s.seeds.done(v.take.id, node, now)
			if err := s.db.DoneSeed(ctx, v.take.id, node, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				s.metrics.dbErrors.WithLabelValues("seed").Inc()
				log.WithError(err).Error("seed: recording that the node holds the model failed")
			}
			log.Info("seed: the node holds the model")
		default:
			if !v.take.handed {
				// Handed whether or not the record is written: an ask
				// handed twice costs nothing.
				s.seeds.handed(v.take.id, node, now)
				if err := s.db.HandSeed(ctx, v.take.id, node, now); err != nil && !errors.Is(err, store.ErrNotFound) {
					s.metrics.dbErrors.WithLabelValues("seed").Inc()
					log.WithError(err).Error("seed: recording the ask as handed failed")
				}
				log.Info("seed: asked the node")
			}
			if !seen[v.ask.Source] {
				seen[v.ask.Source] = true
				out = append(out, *v.ask)
			}
		}
	}
	return out
}

var seedIDRE = gcIDRE

func (s *Server) getSeed(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !seedIDRE.MatchString(id) {
		return api.Errorf(api.CodeInvalid, "seed request id %.80q is not one this coordinator gives out", id)
	}
	st, err := s.db.Seed(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeNotFound, "no seed request %s (requests are kept for a week)", id)
	}
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("read").Inc()
		return api.Errorf(api.CodeUnavailable, "the seed request could not be read (database: %v)", err)
	}
	now := s.now()
	s.view.mu.RLock()
	var m *catalog.Model
	if i, ok := s.view.cat.Index(st.Model); ok {
		m = &s.view.cat.Models[i]
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if n.State != api.SeedAsked {
			continue
		}
		if !now.Before(st.Deadline) || m == nil {
			n.State = api.SeedExpired
			continue
		}
		if vn := s.view.nodes[n.Node]; vn != nil {
			if f := vn.FindModelFetch(*m); f != nil {
				fs := s.fetchStatus(&vn.Node, *f, now)
				if !s.mayFetch(r) {
					redactFetch(&fs)
				}
				n.Fetch = &fs
			}
		}
	}
	s.view.mu.RUnlock()
	writeJSON(w, http.StatusOK, st)
	return nil
}
