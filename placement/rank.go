package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Request is what a job asks for, and the moment it asks.
type Request struct {
	// Model is the catalog entry: its name, source, size and the GPU
	// memory it needs (0: not given, so the memory check is skipped).
	Model catalog.Model
	// Count is how many nodes the job wants (sbatch -N); below 1 means 1.
	// With more than one, every node is kept in one fabric.
	Count int
	// FetchBytes is what a node without the model would fetch (see the
	// function FetchBytes); 0 or less means unknown, and the disk check is
	// then skipped.
	FetchBytes int64
	// Now, StaleAfter and StallAfter judge the nodes' reports and fetches.
	Now        time.Time
	StaleAfter time.Duration
	StallAfter time.Duration
}

// Result is the outcome of one check on one node.
type Result string

const (
	Pass Result = "pass"
	Fail Result = "fail"
	// Skip: the check does not apply or cannot be made; the reason says
	// which. A skipped check never counts against a node.
	Skip Result = "skip"
)

// Check is one check on one node: the memory check and the disk check have
// the same shape. Need and Have are bytes, 0 when unknown.
type Check struct {
	Result Result
	Need   int64
	Have   int64
	Reason string
}

// Tier is where a node ranks, best first. Within a tier, nodes rank in
// name order, so the answer is the same for the same state.
type Tier int

const (
	// TierLocal holds a complete local copy: the fastest to load from.
	TierLocal Tier = iota
	// TierShared sees a complete copy on a shared filesystem.
	TierShared
	// TierFetching is fetching the model now, and not stalled.
	TierFetching
	// TierRoom must fetch, and its cache has room.
	TierRoom
	// TierUnchecked must fetch (or cannot), and its room could not be
	// checked: size or room unknown, a source never fetched, or no report.
	TierUnchecked
	// TierNoRoom must fetch and its cache lacks the room: a job there
	// fails its fetch. Excluding such a node is right.
	TierNoRoom
	// TierStale has not reported for StaleAfter: nothing it said counts.
	TierStale
	// TierUnschedulable is DOWN, DRAINED (and the like) in Slurm.
	TierUnschedulable
	// TierGPUMemory has less GPU memory than the model needs.
	TierGPUMemory
)

var tierNames = [...]string{"holds-local", "holds-shared", "fetching", "has-room", "unchecked", "no-room",
	"stale", "not-schedulable", "gpu-memory"}

func (t Tier) String() string {
	if t >= 0 && int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", int(t))
}

// Usable says whether a job may be placed on a node of this tier without
// a known reason for it to fail.
func (t Tier) Usable() bool { return t <= TierUnchecked }

// Ranked is one node's place in a ranking and why.
type Ranked struct {
	Node   string
	Fabric string
	Tier   Tier
	// Holds is how the node last said it holds the model, fresh or not;
	// Path is where.
	Holds Hold
	Path  string
	// Holder is true when the node counts as a holder: it holds a complete
	// copy, is fresh, and Slurm would start a job there.
	Holder bool
	// Fetch is the node's fetch of the model in progress, if any.
	Fetch *Progress
	// Memory and Disk are the two checks. The disk check is skipped on a
	// node that holds the weights: holding them is what used the space.
	Memory Check
	Disk   Check
	// Reason says in words why the node is in its tier.
	Reason string
}

// NoRoom says whether the node lacks room for the model and does not hold
// it: a job placed there would fail its fetch.
func (r *Ranked) NoRoom() bool { return r.Disk.Result == Fail }

// FabricRank is one fabric, as a multi-node job would weigh it.
type FabricRank struct {
	Fabric string
	// Holders counts the fabric's candidates that count as holders;
	// LocalHolders those of them with a local copy; Usable those in a
	// usable tier (holders included).
	Holders, LocalHolders, Usable int
	// Enough is Usable >= the request's Count.
	Enough bool
	Reason string
}

// Ranking is Rank's answer.
type Ranking struct {
	Model string
	Count int
	// Nodes is every candidate, best first. With Count > 1 the nodes are
	// grouped by fabric, in the order of Fabrics.
	Nodes []Ranked
	// Fabrics is every candidate fabric in the order a job should try
	// them: one with enough usable nodes first, then the one whose nodes
	// can serve the model without fetching, then the one with more usable
	// nodes.
	Fabrics []FabricRank
	// Choice is the nodes to use: the first Count nodes of the first
	// fabric with enough usable nodes. Nil when no fabric has enough.
	Choice []string
	// Note says what a person should know about the whole answer, such as
	// that nobody holds the model (a valid answer: the job fetches it).
	Note string
}

// Rank ranks candidates for req, with a reason for every node. It never
// refuses: a model nobody holds is fetched, and a node whose checks could
// not be made is not excluded for that. Holders rank first (a local copy
// ahead of a shared filer), then nodes fetching it, then nodes with room,
// then nodes whose room is unknown; nodes that lack room, stale nodes,
// nodes Slurm will not use and nodes with too little GPU memory come last.
// A node that never looked for weights ranks with one that looked and found
// nothing: nothing here reads Node.Looked.
func Rank(req Request, candidates []*Node) Ranking {
	count := max(req.Count, 1)
	out := Ranking{Model: req.Model.Name, Count: count, Nodes: make([]Ranked, 0, len(candidates))}
	for _, n := range candidates {
		out.Nodes = append(out.Nodes, rankNode(req, n))
	}

	fabrics := map[string]*FabricRank{}
	for _, r := range out.Nodes {
		f := fabrics[r.Fabric]
		if f == nil {
			f = &FabricRank{Fabric: r.Fabric}
			fabrics[r.Fabric] = f
		}
		if r.Holder && r.Tier.Usable() {
			f.Holders++
			if r.Tier == TierLocal {
				f.LocalHolders++
			}
		}
		if r.Tier.Usable() {
			f.Usable++
		}
	}
	for _, f := range fabrics {
		f.Enough = f.Usable >= count
		out.Fabrics = append(out.Fabrics, *f)
	}
	slices.SortFunc(out.Fabrics, func(a, b FabricRank) int { return fabricCmp(a, b, count) })
	order := make(map[string]int, len(out.Fabrics))
	for i := range out.Fabrics {
		f := &out.Fabrics[i]
		order[f.Fabric] = i
		f.Reason = fabricReason(*f, req.Model.Name, count)
	}

	slices.SortFunc(out.Nodes, func(a, b Ranked) int {
		if count > 1 {
			if c := cmp.Compare(order[a.Fabric], order[b.Fabric]); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
			return c
		}
		return nodeCmp(a.Node, b.Node)
	})

	holders := 0
	for _, f := range out.Fabrics {
		holders += f.Holders
	}
	if len(out.Fabrics) > 0 && out.Fabrics[0].Enough {
		first := out.Fabrics[0].Fabric
		for _, r := range out.Nodes {
			if len(out.Choice) == count {
				break
			}
			if r.Tier.Usable() && (count == 1 || r.Fabric == first) {
				out.Choice = append(out.Choice, r.Node)
			}
		}
	}
	switch {
	case len(candidates) == 0:
		out.Note = "no candidate nodes: none reported, or none is in the nodes asked for"
	case out.Choice == nil && count > 1:
		out.Note = fmt.Sprintf("no fabric has %d usable nodes; Slurm decides, and a job there may have to fetch or fail", count)
	case out.Choice == nil:
		out.Note = "no usable node; Slurm decides"
	case holders == 0 && !Fetchable(req.Model):
		out.Note = fmt.Sprintf("no usable node holds %s, and %s", req.Model.Name, notFetchedWhy(req.Model))
	case holders == 0:
		out.Note = fmt.Sprintf("no usable node holds %s; a job fetches it", req.Model.Name)
	}
	return out
}

// fabricCmp orders fabrics for a job of count nodes: enough usable nodes
// first, then more holders (up to count: a third holder does not help a
// two-node job), more local holders, more usable nodes, then by name with
// the unknown fabric ("", nodes that never reported) last.
func fabricCmp(a, b FabricRank, count int) int {
	if a.Enough != b.Enough {
		if a.Enough {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(min(b.Holders, count), min(a.Holders, count)); c != 0 {
		return c
	}
	if c := cmp.Compare(min(b.LocalHolders, count), min(a.LocalHolders, count)); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Usable, a.Usable); c != 0 {
		return c
	}
	if (a.Fabric == "") != (b.Fabric == "") {
		if a.Fabric == "" {
			return 1
		}
		return -1
	}
	return strings.Compare(a.Fabric, b.Fabric)
}

func fabricReason(f FabricRank, model string, count int) string {
	s := fmt.Sprintf("%s can serve %s without fetching (%d local); %d usable", plural(f.Holders, "node"), model, f.LocalHolders, f.Usable)
	if !f.Enough {
		s += fmt.Sprintf(", the job needs %d", count)
	}
	return s
}

func rankNode(req Request, n *Node) Ranked {
	m := req.Model
	r := Ranked{Node: n.Name, Fabric: n.Fabric, Memory: memoryCheck(m, n)}
	h := n.Holding(m.Name)
	r.Holds, r.Path = h.Hold, h.Path
	reported := !n.Received.IsZero()
	stale := !reported || n.State(req.Now, req.StaleAfter) == StateStale
	fresh := !stale && h.Hold != HoldNone
	r.Holder = fresh && n.Schedulable()

	var fetch *Fetch
	if !stale {
		if f := n.FindModelFetch(m); f != nil {
			p := FetchProgress(n, *f, req.Now, req.StallAfter)
			r.Fetch, fetch = &p, f
		}
	}
	r.Disk = diskCheck(req, n, fresh, reported, stale, fetch)

	switch {
	case r.Memory.Result == Fail:
		r.Tier, r.Reason = TierGPUMemory, r.Memory.Reason
	case !reported:
		r.Tier, r.Reason = TierUnchecked, "no agent has reported from this node: nothing is known of what it holds; a job there fetches what it needs"
	case stale:
		r.Tier = TierStale
		r.Reason = fmt.Sprintf("no report for %s: what it last said does not count", dur(req.Now.Sub(n.Received)))
	case !n.Schedulable():
		r.Tier = TierUnschedulable
		r.Reason = fmt.Sprintf("Slurm has it %s: no job starts there, so it counts as no holder", n.SlurmState)
	case h.Hold == HoldLocal:
		r.Tier, r.Reason = TierLocal, "holds a complete local copy at "+h.Path
	case h.Hold == HoldShared:
		r.Tier, r.Reason = TierShared, "sees a complete copy on a shared filesystem at "+h.Path
	case r.Disk.Result == Fail:
		r.Tier, r.Reason = TierNoRoom, "does not hold it and "+r.Disk.Reason
	case r.Fetch != nil && !r.Fetch.Stalled:
		r.Tier, r.Reason = TierFetching, "fetching it now"
		if r.Fetch.Percent >= 0 {
			r.Reason += fmt.Sprintf(" (%.0f%%)", r.Fetch.Percent)
		}
	case r.Disk.Result == Pass:
		r.Tier, r.Reason = TierRoom, "does not hold it; its cache has room to fetch it"
	default:
		r.Tier, r.Reason = TierUnchecked, "does not hold it; "+r.Disk.Reason
	}
	if r.Fetch != nil && r.Fetch.Stalled && r.Tier > TierFetching {
		r.Reason += fmt.Sprintf("; its fetch has stalled (no byte for %s)", dur(r.Fetch.Since))
	}
	if h.Hold == HoldNone && h.Incomplete != "" && r.Tier >= TierFetching && r.Tier <= TierNoRoom {
		r.Reason += "; an incomplete copy does not count (" + h.Incomplete + ")"
	}
	return r
}

func memoryCheck(m catalog.Model, n *Node) Check {
	c := Check{Need: m.GPUMemory, Have: n.GPUMemory}
	switch {
	case m.GPUMemory <= 0:
		c.Result, c.Need = Skip, 0
		c.Reason = fmt.Sprintf("memory not checked: the catalog gives no GPU memory for %s", m.Name)
	case n.GPUMemory <= 0:
		c.Result, c.Have = Skip, 0
		c.Reason = "memory not checked: the node's GPU memory is unknown (set gpu_memory in its agent's config, or install nvidia-smi)"
	case n.GPUMemory >= m.GPUMemory:
		c.Result = Pass
		c.Reason = fmt.Sprintf("needs %s of GPU memory, has %s", catalog.FormatBytes(m.GPUMemory), catalog.FormatBytes(n.GPUMemory))
	default:
		c.Result = Fail
		c.Reason = fmt.Sprintf("needs %s of GPU memory but has only %s", catalog.FormatBytes(m.GPUMemory), catalog.FormatBytes(n.GPUMemory))
	}
	return c
}

// diskCheck is the disk check: can the node's cache take what a fetch
// needs. A fetch in progress has already used what it wrote, so only the
// rest is needed.
func diskCheck(req Request, n *Node, holds, reported, stale bool, fetch *Fetch) Check {
	m := req.Model
	c := Check{Result: Skip}
	switch {
	case holds:
		c.Reason = "disk not checked: it holds the weights, and holding them is what used the space"
		return c
	case !reported:
		c.Reason = "disk not checked: its cache room is unknown"
		return c
	case stale:
		c.Reason = "disk not checked: its last report is too old"
		return c
	case !Fetchable(m):
		c.Reason = "disk not checked: " + notFetchedWhy(m)
		return c
	case req.FetchBytes <= 0:
		c.Reason = fmt.Sprintf("disk not checked: the size of %s is unknown (no catalog size, no copy seen)", m.Name)
		return c
	}
	free, total, where := n.Room(m)
	if total <= 0 {
		c.Reason = "disk not checked: its " + where + " room is unknown"
		return c
	}
	c.Need, c.Have = req.FetchBytes, free
	if fetch != nil {
		c.Need = max(req.FetchBytes-fetch.Done, 0)
	}
	if free >= c.Need {
		c.Result = Pass
		c.Reason = fmt.Sprintf("a fetch needs %s, its %s has %s free", catalog.FormatBytes(c.Need), where, catalog.FormatBytes(free))
	} else {
		c.Result = Fail
		c.Reason = fmt.Sprintf("a fetch needs %s but its %s has only %s free", catalog.FormatBytes(c.Need), where, catalog.FormatBytes(free))
	}
	return c
}

func notFetchedWhy(m catalog.Model) string {
	if catalog.KindOf(m.Source) == catalog.KindPath {
		return "a path source is never fetched: a node must see it"
	}
	return "the engine resolves a model id itself"
}

func dur(d time.Duration) string { return d.Round(time.Second).String() }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// NodeLess orders node names the way people and sinfo do: by the text
// before the trailing number, then by the number, so n2 comes before n10.
func NodeLess(a, b string) bool { return nodeCmp(a, b) < 0 }

func nodeCmp(a, b string) int {
	pa, na := splitNum(a)
	pb, nb := splitNum(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	if c := cmp.Compare(len(na), len(nb)); c != 0 {
		return c
	}
	return strings.Compare(na, nb)
}

func splitNum(s string) (prefix, num string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	return s[:i], s[i:]
}
