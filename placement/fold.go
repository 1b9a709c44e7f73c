package placement

import (
	"iter"
	"slices"
	"time"
)

// Counts counts nodes by state. Total = OK + Stale + NeverLooked.
type Counts struct {
	Total, OK, Stale, NeverLooked int
}

func (c *Counts) add(s State) {
	c.Total++
	switch s {
	case StateOK:
		c.OK++
	case StateStale:
		c.Stale++
	case StateNeverLooked:
		c.NeverLooked++
	}
}

// Group is one (model, fabric): the fresh nodes holding a complete copy
// each way, and the fetches of the model running there. A node that sees
// one model at two paths (a filer and its own copy) is one holder, listed
// under each kind it has.
type Group struct {
	Shared, Local []string
	Fetching      []NodeFetch
}

// NodeFetch is one fetch of a catalog model on a fresh node.
type NodeFetch struct {
	Node  *Node
	Fetch Fetch
}

// FabricFold is one fabric's nodes by state and its groups.
type FabricFold struct {
	Fabric      string
	Counts      Counts
	Stale       []string
	NeverLooked []string
	// Groups has one entry per catalog model, by index in Catalog.Models.
	Groups []Group
}

// Fold is the whole cluster folded by fabric and by (model, fabric), as of
// one moment: what status shows and its metrics count. Every list in it is
// in the order the nodes were given.
type Fold struct {
	Catalog *Catalog
	Counts  Counts
	// Fabrics by name.
	Fabrics map[string]*FabricFold
	// Largest is the largest complete copy of each model seen on a fresh
	// node anywhere, by model index: the best guess of a fetch's size when
	// the catalog has none.
	Largest []int64
}

// FoldNodes folds nodes as of now. Stale nodes are counted and listed, and
// nothing else of theirs counts.
//
// It runs over every holding of every node (half a million at 10,000 nodes),
// so it works on model indexes and marks rather than maps of names: a
// status over a big cluster must stay well under a second.
func FoldNodes(cat *Catalog, nodes iter.Seq[*Node], now time.Time, staleAfter time.Duration) *Fold {
	nm := len(cat.Models)
	f := &Fold{Catalog: cat, Fabrics: map[string]*FabricFold{}, Largest: make([]int64, nm)}
	// mark[mi] == stamp when the current node holds model mi; flags say how.
	mark := make([]int, nm)
	flags := make([]uint8, nm)
	const sharedFlag, localFlag = 1, 2
	var touched []int
	stamp := 0
	for n := range nodes {
		stamp++
		fa := f.Fabrics[n.Fabric]
		if fa == nil {
			fa = &FabricFold{Fabric: n.Fabric, Groups: make([]Group, nm)}
			f.Fabrics[n.Fabric] = fa
		}
		state := n.State(now, staleAfter)
		f.Counts.add(state)
		fa.Counts.add(state)
		switch state {
		case StateStale:
			fa.Stale = append(fa.Stale, n.Name)
			continue
		case StateNeverLooked:
			fa.NeverLooked = append(fa.NeverLooked, n.Name)
		}
		touched = touched[:0]
		for _, h := range n.Holdings {
			if !h.Complete {
				continue
			}
			mi, ok := cat.index[h.Model]
			if !ok {
				continue
			}
			f.Largest[mi] = max(f.Largest[mi], h.Size)
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
			g := &fa.Groups[mi]
			if flags[mi]&sharedFlag != 0 {
				g.Shared = append(g.Shared, n.Name)
			}
			if flags[mi]&localFlag != 0 {
				g.Local = append(g.Local, n.Name)
			}
		}
		for _, fe := range n.Fetches {
			if mi, ok := cat.bySource[fe.Source]; ok {
				g := &fa.Groups[mi]
				g.Fetching = append(g.Fetching, NodeFetch{Node: n, Fetch: fe})
			}
		}
	}
	return f
}

// FabricNames returns the fabrics that have nodes, sorted.
func (f *Fold) FabricNames() []string {
	out := make([]string, 0, len(f.Fabrics))
	for name := range f.Fabrics {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Presence answers "can this fabric serve the model" for one fabric.
type Presence struct {
	// Serve is HoldShared when a fresh node in the fabric sees a complete
	// copy on a shared filesystem, else HoldLocal when one holds a local
	// copy, else HoldNone. One shared filer answers the question the same
	// as twenty local copies; Serve says which it is.
	Serve Hold
	// Shared and Local are the fresh holders each way (a node may be in
	// both); Holders is the two together, shared first, each once per kind.
	Shared, Local []string
	// FetchBytes is what a job placed in the fabric would fetch when Serve
	// is HoldNone (see FetchBytes); 0 when the fabric holds it.
	FetchBytes int64
	// Fetchable is false when Serve is HoldNone and no job could fetch it.
	Fetchable bool
	Fetching  []NodeFetch
}

// Presence returns model mi's presence in fabric. A fabric no node
// reported holds nothing.
func (f *Fold) Presence(mi int, fabric string) Presence {
	p := Presence{Serve: HoldNone}
	if fa := f.Fabrics[fabric]; fa != nil {
		g := &fa.Groups[mi]
		p.Shared, p.Local, p.Fetching = g.Shared, g.Local, g.Fetching
		switch {
		case len(g.Shared) > 0:
			p.Serve = HoldShared
		case len(g.Local) > 0:
			p.Serve = HoldLocal
		}
	}
	if p.Serve == HoldNone {
		m := f.Catalog.Models[mi]
		p.Fetchable = Fetchable(m)
		p.FetchBytes = FetchBytes(m, f.Largest[mi])
	}
	return p
}

// LargestCopy is the largest complete copy of model on a fresh node among
// nodes: what FetchBytes falls back on when the catalog has no size. It is
// Fold.Largest for one model, without folding everything.
func LargestCopy(nodes iter.Seq[*Node], model string, now time.Time, staleAfter time.Duration) int64 {
	var largest int64
	for n := range nodes {
		if n.State(now, staleAfter) == StateStale {
			continue
		}
		for _, h := range n.Holdings {
			if h.Complete && h.Model == model {
				largest = max(largest, h.Size)
			}
		}
	}
	return largest
}
