package coordinator

import (
	"math"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// group is one (model, fabric): the fresh nodes holding a complete copy each
// way, and the fetches of the model running there.
type group struct {
	shared, local []string
	fetching      []api.FetchStatus
}

type fabricAgg struct {
	counts      api.NodeCounts
	stale       []string
	neverLooked []string
	groups      []group // by model index in view.models
}

// agg is the whole cluster folded by fabric and by (model, fabric). It is
// computed under the view's read lock in one pass over the nodes, in name
// order, so every list in it is already sorted; status, the metrics
// collector and the tests read it.
type agg struct {
	counts  api.NodeCounts
	fabrics map[string]*fabricAgg
	biggest []int64 // largest complete copy of each model anywhere, by model index
}

// group returns the (model index, fabric) group, or nil when no node of the
// fabric reported.
func (a *agg) group(mi int, fabric string) *group {
	if fa := a.fabrics[fabric]; fa != nil {
		return &fa.groups[mi]
	}
	return nil
}

// aggregate folds the view as of now. The caller holds v.mu (read).
//
// It runs over every holding of every node (half a million at 10,000 nodes),
// so it works on model indexes and marks rather than maps of names: a
// status over a big cluster must stay well under a second.
func (s *Server) aggregate(now time.Time) *agg {
	v := s.view
	nm := len(v.models)
	a := &agg{fabrics: map[string]*fabricAgg{}, biggest: make([]int64, nm)}
	// mark[mi] == stamp when the current node holds model mi; flags say how.
	mark := make([]int, nm)
	flags := make([]uint8, nm)
	const sharedFlag, localFlag = 1, 2
	var touched []int
	for i, name := range v.names {
		n := v.nodes[name]
		fa := a.fabrics[n.Fabric]
		if fa == nil {
			fa = &fabricAgg{groups: make([]group, nm)}
			a.fabrics[n.Fabric] = fa
		}
		state := nodeState(n, now, s.staleAfter)
		count(&a.counts, state)
		count(&fa.counts, state)
		switch state {
		case api.NodeStale:
			fa.stale = append(fa.stale, n.Name)
			continue
		case api.NodeNeverLooked:
			fa.neverLooked = append(fa.neverLooked, n.Name)
		}
		// A node may see one model at two paths (a filer and its own
		// copy); it is one holder, counted under each kind it has.
		stamp := i + 1
		touched = touched[:0]
		for _, h := range n.Holdings {
			if !h.Complete {
				continue
			}
			mi, ok := v.model[h.Model]
			if !ok {
				continue
			}
			if h.Size > a.biggest[mi] {
				a.biggest[mi] = h.Size
			}
			if mark[mi] != stamp {
				mark[mi], flags[mi] = stamp, 0
				touched = append(touched, mi)
			}
			if h.Shared {
				flags[mi] |= sharedFlag
			} else {
				flags[mi] |= localFlag
			}
		}
		for _, mi := range touched {
			g := &fa.groups[mi]
			if flags[mi]&sharedFlag != 0 {
				g.shared = append(g.shared, n.Name)
			}
			if flags[mi]&localFlag != 0 {
				g.local = append(g.local, n.Name)
			}
		}
		for _, f := range n.Fetches {
			if model, ok := v.source[f.Source]; ok {
				g := &fa.groups[v.model[model]]
				g.fetching = append(g.fetching, s.fetchStatus(n, f, now))
			}
		}
	}
	return a
}

func count(c *api.NodeCounts, state string) {
	c.Total++
	switch state {
	case api.NodeOK:
		c.OK++
	case api.NodeStale:
		c.Stale++
	case api.NodeNeverLooked:
		c.NeverLooked++
	}
}

// fetchStatus turns a reported fetch into what status shows. How long since
// the last byte is measured on two clocks, each against itself: the agent's
// (report time minus last progress) and the coordinator's (now minus when
// the report arrived), so a node whose clock is off is still judged right.
func (s *Server) fetchStatus(n *store.Node, f api.Fetch, now time.Time) api.FetchStatus {
	fs := api.FetchStatus{Node: n.Name, Source: f.Source, Done: f.Done, Total: f.Total, Rate: f.Rate,
		Percent: -1, ETA: -1}
	last := f.Progressed
	if last.IsZero() {
		last = f.Started
	}
	since := now.Sub(n.Received)
	if !last.IsZero() && !n.ReportTime.IsZero() && n.ReportTime.After(last) {
		since += n.ReportTime.Sub(last)
	}
	fs.SinceProgress = round(since.Seconds())
	fs.Stalled = since > s.cfg.StallAfter
	if f.Total > 0 {
		fs.Percent = round(100 * float64(f.Done) / float64(f.Total))
		if f.Rate > 0 && !fs.Stalled && f.Done <= f.Total {
			fs.ETA = round(float64(f.Total-f.Done) / f.Rate)
		}
	}
	return fs
}

func round(x float64) float64 { return math.Round(x*10) / 10 }

func (s *Server) presence(a *agg, m api.Model, fabric string) api.FabricPresence {
	p := api.FabricPresence{Fabric: fabric, Serve: api.HoldNone}
	mi := s.view.model[m.Name]
	if g := a.group(mi, fabric); g != nil {
		p.SharedNodes, p.LocalNodes = len(g.shared), len(g.local)
		switch {
		case len(g.shared) > 0:
			p.Serve = api.HoldShared
		case len(g.local) > 0:
			p.Serve = api.HoldLocal
		}
		switch {
		case len(g.local) == 0:
			p.Holders = slurm.Compress(g.shared)
		case len(g.shared) == 0:
			p.Holders = slurm.Compress(g.local)
		default:
			p.Holders = slurm.Compress(append(append([]string(nil), g.shared...), g.local...))
		}
		p.Fetching = g.fetching
	}
	if p.Serve == api.HoldNone {
		p.Fetchable = s.view.kinds[m.Name] == catalog.KindRemote
		switch {
		case m.Size > 0:
			p.FetchBytes = m.Size
		case a.biggest[mi] > 0:
			p.FetchBytes = a.biggest[mi]
		default:
			p.FetchBytes = -1
		}
	}
	return p
}

func sortedFabrics(a *agg) []string {
	out := make([]string, 0, len(a.fabrics))
	for f := range a.fabrics {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

func (s *Server) header() (interval, staleAfter, stallAfter float64) {
	return s.cfg.ReportInterval.Seconds(), s.staleAfter.Seconds(), s.cfg.StallAfter.Seconds()
}

// Status computes the cluster status as of now.
func (s *Server) Status(now time.Time) *api.Status {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	a := s.aggregate(now)
	st := &api.Status{Generated: now.UTC(), Nodes: a.counts, Fabrics: []api.FabricNodes{}, Models: []api.ModelStatus{}}
	st.ReportInterval, st.StaleAfter, st.StallAfter = s.header()
	st.Features = s.features.status()
	fabrics := sortedFabrics(a)
	for _, f := range fabrics {
		fa := a.fabrics[f]
		st.Fabrics = append(st.Fabrics, api.FabricNodes{Fabric: f, Counts: fa.counts,
			Stale: slurm.Compress(fa.stale), NeverLooked: slurm.Compress(fa.neverLooked)})
	}
	// Compressing the holders into hostlists is most of the work left, and
	// each model's is independent of the others: spread it over the CPUs.
	st.Models = make([]api.ModelStatus, len(s.view.models))
	workers := min(runtime.GOMAXPROCS(0), len(s.view.models))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(s.view.models) {
					return
				}
				m := s.view.models[i]
				ms := api.ModelStatus{Model: m, Fabrics: make([]api.FabricPresence, 0, len(fabrics))}
				for _, f := range fabrics {
					ms.Fabrics = append(ms.Fabrics, s.presence(a, m, f))
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
	i, ok := s.view.model[name]
	if !ok {
		return nil, false
	}
	m := s.view.models[i]
	a := s.aggregate(now)
	out := &api.ModelNodes{Generated: now.UTC(), Model: m, Fabrics: []api.FabricPresence{},
		Nodes: make([]api.NodePresence, 0, len(s.view.nodes))}
	out.ReportInterval, out.StaleAfter, out.StallAfter = s.header()
	for _, f := range sortedFabrics(a) {
		out.Fabrics = append(out.Fabrics, s.presence(a, m, f))
	}
	for _, nodeName := range s.view.names {
		n := s.view.nodes[nodeName]
		np := api.NodePresence{
			Node: n.Name, Fabric: n.Fabric, State: nodeState(n, now, s.staleAfter), Holds: api.HoldNone,
			CacheFree: n.CacheFree, CacheTotal: n.CacheTotal, LastReport: n.Received,
			Age: round(now.Sub(n.Received).Seconds()), AgentVersion: n.AgentVersion, Errors: lastErrors(n.Errors),
		}
		// A local copy is the one a job should use, so it wins over a
		// shared one for the path; either makes the node a holder.
		for _, h := range n.Holdings {
			if h.Model != name {
				continue
			}
			switch {
			case h.Complete && !h.Shared:
				np.Holds, np.Path, np.Size = api.HoldLocal, h.Path, h.Size
			case h.Complete && np.Holds == api.HoldNone:
				np.Holds, np.Path, np.Size = api.HoldShared, h.Path, h.Size
			case !h.Complete && np.Incomplete == "":
				np.Incomplete = h.Path + ": " + h.Problem
				if h.Problem == "" {
					np.Incomplete = h.Path + ": incomplete"
				}
			}
		}
		if np.Holds != api.HoldNone {
			np.Incomplete = ""
		}
		if f := findFetch(n.Fetches, m.Source); f != nil {
			fs := s.fetchStatus(n, *f, now)
			np.Fetch = &fs
		}
		out.Nodes = append(out.Nodes, np)
	}
	return out, true
}

// nodeLess orders node names the way people and sinfo do: by the text
// before the trailing number, then by the number, so n2 comes before n10.
func nodeLess(a, b string) bool {
	pa, na := splitNum(a)
	pb, nb := splitNum(b)
	if pa != pb {
		return pa < pb
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return na < nb
}

func splitNum(s string) (prefix, num string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
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
