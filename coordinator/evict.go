package coordinator

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Eviction's question (api/evict.go): is a node's copy of a model the last
// complete one in its fabric? The view knows who holds what; grants holds
// the copies granted for eviction and not yet gone from their nodes'
// reports, so that each grant counts a copy as gone at once and two nodes
// evicting together cannot take a fabric's last two copies.

// grants are the copies granted for eviction, by fabric and model, with
// when each grant lapses.
type grants struct {
	mu sync.Mutex
	m  map[[2]string]map[string]time.Time // {fabric, model} → node → lapses
}

// granted says whether node's copy of model in fabric is granted, as of
// now. The caller holds g.mu.
func (g *grants) granted(fabric, model, node string, now time.Time) bool {
	t, ok := g.m[[2]string{fabric, model}][node]
	return ok && now.Before(t)
}

func (g *grants) grant(fabric, model, node string, until time.Time) {
	k := [2]string{fabric, model}
	if g.m == nil {
		g.m = map[[2]string]map[string]time.Time{}
	}
	if g.m[k] == nil {
		g.m[k] = map[string]time.Time{}
	}
	g.m[k][node] = until
}

// prune drops lapsed grants. The caller holds g.mu.
func (g *grants) prune(now time.Time) {
	for k, nodes := range g.m {
		for n, t := range nodes {
			if !now.Before(t) {
				delete(nodes, n)
			}
		}
		if len(nodes) == 0 {
			delete(g.m, k)
		}
	}
}

func (s *Server) postEvict(w http.ResponseWriter, r *http.Request) error {
	var q api.EvictQuery
	if err := decode(w, r, MaxModelBytes, "evict query", &q); err != nil {
		return err
	}
	if err := api.ValidNodeName(q.Node); err != nil {
		return api.Errorf(api.CodeInvalid, "evict query: %v", err)
	}
	if n := len(q.Models) + len(q.Evict); n > MaxWeights {
		return api.Errorf(api.CodeInvalid, "evict query from %s names %d models; the limit is %d", q.Node, n, MaxWeights)
	}
	for _, m := range append(slices.Clone(q.Models), q.Evict...) {
		if err := catalog.ValidModelName(m); err != nil {
			return api.Errorf(api.CodeInvalid, "evict query from %s: %v", q.Node, err)
		}
	}
	if err := s.speaksFor(r, q.Node); err != nil {
		return err
	}
	now := s.now()
	s.view.mu.RLock()
	me := s.view.nodes[q.Node]
	if me == nil {
		s.view.mu.RUnlock()
		return api.Errorf(api.CodeNotFound, "node %s has not reported yet, so its fabric is not known; it evicts nothing that could be a last copy until it has", q.Node)
	}
	fabric := me.Fabric
	ans := api.EvictAnswer{Fabric: fabric, Others: map[string]int{}, Granted: []string{}}
	asked := append(slices.Clone(q.Models), q.Evict...)
	slices.Sort(asked)
	asked = slices.Compact(asked)
	// The holders per model, read once under the view's lock.
	holders := make(map[string][]string, len(asked))
	for _, m := range asked {
		if h := me.Holding(m); h.Shared || h.Hold == placement.HoldShared {
			// The asking node sees the model on a filer: its local copy is
			// not the fabric's last.
			holders[m] = append(holders[m], "")
		}
	}
	for n := range s.view.all() {
		if n.Name == q.Node || n.Fabric != fabric {
			continue
		}
		for _, m := range n.Serves(now, s.staleAfter) {
			if _, ok := holders[m]; ok || slices.Contains(asked, m) {
				holders[m] = append(holders[m], n.Name)
			}
		}
	}
	s.view.mu.RUnlock()

	s.grants.mu.Lock()
	defer s.grants.mu.Unlock()
	s.grants.prune(now)
	count := func(m string) int {
		k := 0
		for _, n := range holders[m] {
			if n == "" || !s.grants.granted(fabric, m, n, now) {
				k++
			}
		}
		return k
	}
	until := now.Add(2 * s.cfg.ReportInterval)
	for _, m := range q.Evict {
		if count(m) > 0 && !slices.Contains(ans.Granted, m) {
			s.grants.grant(fabric, m, q.Node, until)
			ans.Granted = append(ans.Granted, m)
		}
	}
	for _, m := range asked {
		ans.Others[m] = count(m)
	}
	if len(ans.Granted) > 0 {
		s.log.WithFields(map[string]any{"node": q.Node, "fabric": fabric, "granted": ans.Granted}).Info("eviction granted: other copies remain in the fabric")
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}
