package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/placement"
)

// view is the coordinator's in-memory copy of what the store holds: the
// catalog, and every node with its holdings and fetches, as the presence
// model (package placement) reads them. Status, placement and the feature
// reconciler are computed from it, so a status over ten thousand nodes reads
// no database at all.
//
// The database stays the source of truth. The view is loaded from it at
// start, changed after every committed ingest batch by the same goroutine
// that committed it, and reloaded after a catalog change (which rematches
// presence in the database). Both writers hold Server.writeMu across the
// database write and the view change, so the view never goes back in time.
type view struct {
	mu    sync.RWMutex
	nodes map[string]*viewNode
	names []string // every key of nodes, in placement.NodeLess order
	// keys holds, per node, the fingerprint of the weights (as sent) of its
	// last stored report; see wireReport. It survives reloads, and starts
	// empty after a restart, which costs one full decode per node.
	keys map[string][32]byte
	cat  *placement.Catalog
	// files indexes cat's fetched files by source, for the swarms
	// (swarmcheck.go).
	files map[string]catalogFile
	// revisions indexes its models of several files by source, each as
	// one revision (swarmrev.go).
	revisions map[string]catalogFile
	// catID and catGen are the catalog's identity and generation, read
	// with cat, so that GET /v1/models never pairs models with another
	// generation's number.
	catID  string
	catGen int64
	// catTag names the catalog as served (api.ReportAnswer.CatalogTag):
	// made once per load, from the same models.
	catTag string
	// catHistory, catDropped, catTrusted and catTrustedAt are the
	// catalog's history (store/history.go), read with it.
	catHistory   []string
	catDropped   map[string]string
	catTrusted   string
	catTrustedAt time.Time
	// slurm is each node's Slurm state as last read from sinfo (see
	// setSlurmStates); it survives reloads and new reports, which say
	// nothing of Slurm.
	slurm map[string]string
}

// viewNode is a node of the presence model plus what only status shows.
type viewNode struct {
	placement.Node
	agentVersion string
	errors       []string
	// gcHeld and gcHeldSince are the node's gc hold (api.Report.GCHeld).
	gcHeld      string
	gcHeldSince time.Time
	// cacheDir is where the node fetches to; gc asks about the cache
	// names it reported there.
	cacheDir string
	// peerAddr is its chunk server's address, "" none: swarm plans offer
	// it to the node's fabric.
	peerAddr string
}

// presenceNode is the one place a stored node becomes a node of the
// presence model.
func presenceNode(n *store.Node) *viewNode {
	vn := &viewNode{
		Node: placement.Node{
			Name: n.Name, Fabric: n.Fabric, Looked: n.Looked, Received: n.Received, ReportTime: n.ReportTime,
			CacheFree: n.CacheFree, CacheTotal: n.CacheTotal, HFCacheFree: n.HFCacheFree, HFCacheTotal: n.HFCacheTotal,
			GPUMemory: n.GPUMemory, Holdings: n.Holdings,
		},
		agentVersion: n.AgentVersion,
		errors:       n.Errors,
		gcHeld:       n.GCHeld,
		gcHeldSince:  n.GCHeldSince,
		cacheDir:     n.CacheDir,
		peerAddr:     n.PeerAddr,
	}
	if len(n.Fetches) > 0 {
		vn.Fetches = make([]placement.Fetch, len(n.Fetches))
		for i, f := range n.Fetches {
			vn.Fetches[i] = placement.Fetch{Source: f.Source, Done: f.Done, Total: f.Total, Rate: f.Rate,
				Started: f.Started, Progressed: f.Progressed}
		}
	}
	return vn
}

func newView() *view {
	return &view{nodes: map[string]*viewNode{}, keys: map[string][32]byte{}, slurm: map[string]string{},
		cat: placement.NewCatalog(nil)}
}

// load replaces the view with the store's state.
func (v *view) load(ctx context.Context, db *store.DB) error {
	models, err := db.Models(ctx)
	if err != nil {
		return err
	}
	catID, catGen, err := db.CatalogIdentity(ctx)
	if err != nil {
		return err
	}
	history, dropped, trusted, trustedAt, err := db.CatalogHistory(ctx)
	if err != nil {
		return err
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*viewNode, len(nodes))
	for _, n := range nodes {
		m[n.Name] = presenceNode(n)
	}
	cat := placement.NewCatalog(models)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes = m
	v.names = v.names[:0]
	for name, n := range m {
		n.SlurmState = v.slurm[name]
		v.names = append(v.names, name)
	}
	sort.Slice(v.names, func(i, j int) bool { return placement.NodeLess(v.names[i], v.names[j]) })
	v.cat = cat
	v.files = catalogFiles(models)
	v.revisions = catalogRevisions(models)
	v.catID, v.catGen = catID, catGen
	v.catHistory, v.catDropped, v.catTrusted, v.catTrustedAt = history, dropped, trusted, trustedAt
	v.catTag = catalogTag(v.catalogLocked())
	return nil
}

// catalogLocked is the catalog's answer (GET /v1/models) as an agent reads
// it, its sources unredacted; its Models are the view's own, not to be
// changed. The caller holds v.mu.
func (v *view) catalogLocked() api.Models {
	return api.Models{Models: v.cat.Models, CatalogID: v.catID, Generation: v.catGen,
		History: v.catHistory, Superseded: v.catDropped, Trusted: v.catTrusted, TrustedAt: v.catTrustedAt}
}

// catalogTag names a catalog as agents read it, for ReportAnswer.CatalogTag:
// the identity and generation, and a digest of the whole answer an agent
// keeps in its copy: the entries, since a pin taken or forgotten changes
// one without a new generation, and a database restored from a backup can
// reach a generation it had before with other entries; and the history,
// the names an admin's change dropped and an admin's adoption (gc
// --trust), none of which raises the generation either: an agent that
// missed an adoption would go on holding its gc on a catalog an admin
// trusted. Made once per catalog change; every report answer carries it.
func catalogTag(ans api.Models) string {
	b, err := json.Marshal(ans)
	if err != nil {
		// Never for these types; an empty tag has agents read the
		// catalog after every report, which is always correct.
		return ""
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s/%d/%s", ans.CatalogID, ans.Generation, hex.EncodeToString(sum[:12]))
}

// all yields every node in name order. The caller holds v.mu.
func (v *view) all() iter.Seq[*placement.Node] {
	return func(yield func(*placement.Node) bool) {
		for _, name := range v.names {
			if !yield(&v.nodes[name].Node) {
				return
			}
		}
	}
}

// setSlurmStates records each node's Slurm state (sinfo %T), replacing what
// was known: a node missing from states is unknown again, which counts as
// schedulable. The feature reconciler calls it with what it read.
func (v *view) setSlurmStates(states map[string]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.slurm = maps.Clone(states)
	if v.slurm == nil {
		v.slurm = map[string]string{}
	}
	for name, n := range v.nodes {
		n.SlurmState = v.slurm[name]
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
	converted := make([]*viewNode, len(stored))
	for i, sn := range stored {
		converted[i] = presenceNode(sn.node)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, sn := range stored {
		n := converted[i]
		old := v.nodes[n.Name]
		if old == nil || n.Received.Sub(old.Received) > staleAfter || !sn.same && !sameHeld(old.Holdings, n.Holdings) {
			changed = true
		}
		if old == nil {
			// Kept in order here, so that no status has to sort ten
			// thousand names; a new node costs one binary search and a copy.
			i := sort.Search(len(v.names), func(i int) bool { return !placement.NodeLess(v.names[i], n.Name) })
			v.names = slices.Insert(v.names, i, n.Name)
		} else {
			if sn.same {
				n.Holdings = old.Holdings
			}
			for _, f := range n.Fetches {
				prev := old.FindFetch(f.Source)
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
		n.SlurmState = v.slurm[n.Name]
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
