package coordinator

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

// view is the coordinator's in-memory copy of what the store holds: the
// catalog, and every node with its holdings and fetches. Status is computed
// from it, so a status over ten thousand nodes reads no database at all.
//
// The database stays the source of truth. The view is loaded from it at
// start, changed after every committed ingest batch by the same goroutine
// that committed it, and reloaded after a catalog change (which rematches
// presence in the database). Both writers hold Server.writeMu across the
// database write and the view change, so the view never goes back in time.
type view struct {
	mu    sync.RWMutex
	nodes map[string]*store.Node
	names []string // every key of nodes, in nodeLess order
	// keys holds, per node, the fingerprint of the weights (as sent) of its
	// last stored report; see wireReport. It survives reloads, and starts
	// empty after a restart, which costs one full decode per node.
	keys   map[string][32]byte
	models []api.Model       // name order
	source map[string]string // catalog source → model name, to name fetches
	model  map[string]int    // model name → index in models
	kinds  map[string]catalog.Kind
}

func newView() *view {
	return &view{nodes: map[string]*store.Node{}, keys: map[string][32]byte{}}
}

// load replaces the view with the store's state.
func (v *view) load(ctx context.Context, db *store.DB) error {
	models, err := db.Models(ctx)
	if err != nil {
		return err
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*store.Node, len(nodes))
	for _, n := range nodes {
		m[n.Name] = n
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes = m
	v.names = v.names[:0]
	for name := range m {
		v.names = append(v.names, name)
	}
	sort.Slice(v.names, func(i, j int) bool { return nodeLess(v.names[i], v.names[j]) })
	v.setModels(models)
	return nil
}

func (v *view) setModels(models []api.Model) {
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	v.models = models
	v.source = make(map[string]string, len(models))
	v.model = make(map[string]int, len(models))
	v.kinds = make(map[string]catalog.Kind, len(models))
	for i, m := range models {
		v.source[m.Source] = m.Name
		v.model[m.Name] = i
		v.kinds[m.Name] = catalog.KindOf(m.Source)
	}
}

// storedNode is a node as the store just stored it, with the fingerprint
// of its weights; same says its weights were not sent again, so its
// holdings are those already in the view.
type storedNode struct {
	node *store.Node
	key  [32]byte
	same bool
}

// sameWeights says whether key is the fingerprint of node's stored weights.
func (v *view) sameWeights(node string, key [32]byte) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	k, ok := v.keys[node]
	return ok && k == key
}

// update puts freshly stored nodes in place of their old selves and returns
// how many bytes their fetches advanced by since the previous report: the
// coordinator only ever sees fetch progress as gauges, so the bytes-fetched
// counter is built from the differences (a fetch that finishes between two
// reports contributes what was seen of it). changed says whether the
// models a node holds complete may have changed: a new node, other complete
// holdings, or a node heard from again after longer than staleAfter (it was
// stale). The feature reconciler runs on it, so a report that changes
// nothing it cares for (sizes, fetch progress) must not say so.
func (v *view) update(stored []storedNode, staleAfter time.Duration) (fetched int64, changed bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, sn := range stored {
		n := sn.node
		old := v.nodes[n.Name]
		if old == nil || n.Received.Sub(old.Received) > staleAfter || !sn.same && !sameHeld(old.Holdings, n.Holdings) {
			changed = true
		}
		if old == nil {
			// Kept in order here, so that no status has to sort ten
			// thousand names; a new node costs one binary search and a copy.
			i := sort.Search(len(v.names), func(i int) bool { return !nodeLess(v.names[i], n.Name) })
			v.names = slices.Insert(v.names, i, n.Name)
		} else {
			if sn.same {
				n.Holdings = old.Holdings
			}
			for _, f := range n.Fetches {
				prev := findFetch(old.Fetches, f.Source)
				switch {
				case prev == nil:
					fetched += max(f.Done, 0)
				case prev.Started.Equal(f.Started) && f.Done > prev.Done:
					fetched += f.Done - prev.Done
				case !prev.Started.Equal(f.Started):
					fetched += max(f.Done, 0) // restarted: a new fetch
				}
			}
		}
		v.nodes[n.Name] = n
		v.keys[n.Name] = sn.key
	}
	return fetched, changed
}

// sameHeld says whether a and b hold the same models complete.
func sameHeld(a, b []store.Holding) bool {
	held := func(hs []store.Holding) []string {
		var out []string
		for _, h := range hs {
			if h.Complete {
				out = append(out, h.Model)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(held(a), held(b))
}

func findFetch(fs []api.Fetch, source string) *api.Fetch {
	for i := range fs {
		if fs[i].Source == source {
			return &fs[i]
		}
	}
	return nil
}

// nodeState says whether n is fresh, stale or never looked, as of now.
// Staleness wins: a stale node's last word on anything is not trusted.
func nodeState(n *store.Node, now time.Time, staleAfter time.Duration) string {
	switch {
	case now.Sub(n.Received) > staleAfter:
		return api.NodeStale
	case !n.Looked:
		return api.NodeNeverLooked
	}
	return api.NodeOK
}
