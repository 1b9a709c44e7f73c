package coordinator

import (
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// fold folds the view as of now with the presence model's rules. The
// caller holds v.mu (read). Every list in it is in node name order.
func (s *Server) fold(now time.Time) *placement.Fold {
	return placement.FoldNodes(s.view.cat, s.view.all(), now, s.staleAfter)
}

// fetchStatus turns a reported fetch into what status shows, judged by the
// presence model (placement.FetchProgress) and rounded for people.
func (s *Server) fetchStatus(n *placement.Node, f placement.Fetch, now time.Time) api.FetchStatus {
	p := placement.FetchProgress(n, f, now, s.cfg.StallAfter)
	fs := api.FetchStatus{Node: n.Name, Source: f.Source, Done: f.Done, Total: f.Total, Rate: f.Rate,
		Percent: -1, ETA: -1, SinceProgress: round(p.Since.Seconds()), Stalled: p.Stalled}
	if p.Percent >= 0 {
		fs.Percent = round(p.Percent)
	}
	if p.ETA >= 0 {
		fs.ETA = round(p.ETA.Seconds())
	}
	return fs
}

func round(x float64) float64 { return math.Round(x*10) / 10 }

func apiCounts(c placement.Counts) api.NodeCounts {
	return api.NodeCounts{Total: c.Total, OK: c.OK, Stale: c.Stale, NeverLooked: c.NeverLooked}
}

// presence is the API's form of placement's answer for one model and fabric.
func (s *Server) presence(f *placement.Fold, mi int, fabric string, now time.Time) api.FabricPresence {
	p := f.Presence(mi, fabric)
	out := api.FabricPresence{Fabric: fabric, Serve: string(p.Serve), SharedNodes: len(p.Shared),
		LocalNodes: len(p.Local), FetchBytes: p.FetchBytes, Fetchable: p.Fetchable}
	switch {
	case len(p.Local) == 0:
		out.Holders = slurm.Compress(p.Shared)
	case len(p.Shared) == 0:
		out.Holders = slurm.Compress(p.Local)
	default:
		out.Holders = slurm.Compress(append(append([]string(nil), p.Shared...), p.Local...))
	}
	for _, nf := range p.Fetching {
		out.Fetching = append(out.Fetching, s.fetchStatus(nf.Node, nf.Fetch, now))
	}
	return out
}

// gcHeld groups the fresh nodes whose gc is held, by the kind of reason
// (its first clause: "another coordinator database", "does not descend",
// "older generation"), largest group first. The caller holds s.view.mu.
func (s *Server) gcHeld(now time.Time) []api.GCHeldGroup {
	groups := map[string]*api.GCHeldGroup{}
	names := map[string][]string{}
	for n := range s.view.all() {
		vn := s.view.nodes[n.Name]
		if vn == nil || vn.gcHeld == "" || n.State(now, s.staleAfter) == placement.StateStale {
			continue
		}
		kind := vn.gcHeld
		if i := strings.Index(kind, ":"); i > 0 {
			kind = kind[:i]
		}
		g := groups[kind]
		if g == nil {
			g = &api.GCHeldGroup{Why: vn.gcHeld, Since: vn.gcHeldSince}
			groups[kind] = g
		}
		if !vn.gcHeldSince.IsZero() && (g.Since.IsZero() || vn.gcHeldSince.Before(g.Since)) {
			g.Since = vn.gcHeldSince
		}
		g.Count++
		names[kind] = append(names[kind], n.Name)
	}
	out := make([]api.GCHeldGroup, 0, len(groups))
	for kind, g := range groups {
		g.Nodes = slurm.Compress(names[kind])
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Why < out[j].Why
	})
	return out
}

func (s *Server) header() (interval, staleAfter, stallAfter float64) {
	return s.cfg.ReportInterval.Seconds(), s.staleAfter.Seconds(), s.cfg.StallAfter.Seconds()
}

// Status computes the cluster status as of now.
func (s *Server) Status(now time.Time) *api.Status {
	// Read before the view's lock is taken: a swarm report holds the swarm
	// lock while it takes the view's.
	swarms := s.swarms.snapshot(now)
	traffic := s.swarms.fabricBytes()
	seeds := s.seeds.asking(now)
	// The prefetcher reads the view under its own lock: read it first.
	var pf *api.PrefetchSummary
	if s.prefetch != nil {
		pf = s.prefetch.Status()
	}
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	f := s.fold(now)
	st := &api.Status{Generated: now.UTC(), Nodes: apiCounts(f.Counts), Fabrics: []api.FabricNodes{}, Models: []api.ModelStatus{},
		Swarms: s.nameSwarms(swarms), SwarmBytes: traffic, Seeds: seeds, Prefetch: pf}
	st.ReportInterval, st.StaleAfter, st.StallAfter = s.header()
	st.Features = s.features.status()
	st.FabricsFrom = s.fabricsFrom()
	st.GCHeld = s.gcHeld(now)
	fabrics := f.FabricNames()
	for _, name := range fabrics {
		fa := f.Fabrics[name]
		st.Fabrics = append(st.Fabrics, api.FabricNodes{Fabric: name, Counts: apiCounts(fa.Counts),
			Stale: slurm.Compress(fa.Stale), NeverLooked: slurm.Compress(fa.NeverLooked)})
	}
	// Compressing the holders into hostlists is most of the work left, and
	// each model's is independent of the others: spread it over the CPUs.
	models := s.view.cat.Models
	st.Models = make([]api.ModelStatus, len(models))
	workers := min(runtime.GOMAXPROCS(0), len(models))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(models) {
					return
				}
				ms := api.ModelStatus{Model: models[i], Fabrics: make([]api.FabricPresence, 0, len(fabrics))}
				for _, fab := range fabrics {
					ms.Fabrics = append(ms.Fabrics, s.presence(f, i, fab, now))
				}
				st.Models[i] = ms
			}
		})
	}
	wg.Wait()
	return st
}

// ModelStatus computes one model's status, node by node, as of now; ok is
// false when the model is not in the catalog.
func (s *Server) ModelStatus(name string, now time.Time) (_ *api.ModelNodes, ok bool) {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	i, ok := s.view.cat.Index(name)
	if !ok {
		return nil, false
	}
	m := s.view.cat.Models[i]
	f := s.fold(now)
	out := &api.ModelNodes{Generated: now.UTC(), Model: m, Fabrics: []api.FabricPresence{},
		Nodes: make([]api.NodePresence, 0, len(s.view.nodes))}
	out.ReportInterval, out.StaleAfter, out.StallAfter = s.header()
	for _, fab := range f.FabricNames() {
		out.Fabrics = append(out.Fabrics, s.presence(f, i, fab, now))
	}
	for _, nodeName := range s.view.names {
		n := s.view.nodes[nodeName]
		h := n.Holding(name)
		free, total, _ := n.Room(m)
		np := api.NodePresence{
			Node: n.Name, Fabric: n.Fabric, State: string(n.State(now, s.staleAfter)), Holds: string(h.Hold),
			Path: h.Path, Size: h.Size, Incomplete: h.Incomplete,
			CacheFree: free, CacheTotal: total, LastReport: n.Received,
			Age: round(now.Sub(n.Received).Seconds()), AgentVersion: n.agentVersion, Errors: lastErrors(n.errors),
		}
		if fe := n.FindModelFetch(m); fe != nil {
			fs := s.fetchStatus(&n.Node, *fe, now)
			np.Fetch = &fs
		}
		out.Nodes = append(out.Nodes, np)
	}
	return out, true
}

// nodeErrors is how many of a node's reported errors status shows per node:
// the newest few say what is wrong, and ten thousand nodes with a full
// backlog each would make an answer of hundreds of megabytes.
const nodeErrors = 3

func lastErrors(errs []string) []string {
	if len(errs) > nodeErrors {
		return errs[len(errs)-nodeErrors:]
	}
	return errs
}
