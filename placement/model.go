// Package placement is llmgw's presence model and the ranking built on it:
// what each node can serve now without fetching, the same folded per fabric
// and model for status, the Slurm features a node should carry, and the
// ranking of nodes for a job with a reason for each.
//
// It is pure: no I/O, and no clock (now is always a parameter). It imports
// only the name rules (weights/catalog). The coordinator's status, its
// feature reconciler and the ranking all read these types and functions, so
// "is this node a holder" has one answer everywhere, and each rule is tested
// with tables.
package placement

import (
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// FeaturePrefix starts every Slurm node feature llmgw owns: a node that can
// serve model M without fetching carries FeaturePrefix+M. Features without
// it (an admin's, like "ib-a") are never touched. It is the one spelling of
// the prefix: the reconciler, the sbatch helper and job_submit.lua's feature
// file all take it from here.
const FeaturePrefix = "llmgw."

// StaleIntervals is how many report intervals a node may miss before it is
// stale. One missed report is routine (a slow scan, a restart); three in a
// row is a node that is down or cut off, and what it last said is no longer
// a promise.
const StaleIntervals = 3

// StaleAfter is how long a node reporting every interval may go unheard
// before it is stale.
func StaleAfter(interval time.Duration) time.Duration { return StaleIntervals * interval }

// State is a node's freshness, as of some moment.
type State string

// Node states; the values are the API's (api.NodeOK and so on).
const (
	// StateOK: the node reported recently and looked in its weight dirs.
	StateOK State = "ok"
	// StateStale: no report for StaleAfter; nothing it said counts.
	StateStale State = "stale"
	// StateNeverLooked: the node reports but has no weight directories
	// configured (it sees only its fetch cache). It ranks exactly like a
	// node that looked and found nothing.
	StateNeverLooked State = "never-looked"
)

// Hold is how a node or a fabric holds a model; the values are the API's
// (api.HoldShared and so on).
type Hold string

const (
	// HoldLocal is a complete copy on the node's own disk: the fastest to
	// load from.
	HoldLocal Hold = "local"
	// HoldShared is a complete copy on a network filesystem the node sees.
	HoldShared Hold = "shared"
	// HoldNone is no complete copy.
	HoldNone Hold = "none"
)

// Node is one node as its agent last reported it, plus what Slurm says of
// it. The coordinator builds these from its store; tests build them by hand.
type Node struct {
	Name   string
	Fabric string
	// Looked is false when the node has no weight directories configured.
	// Nothing here ranks on it: such a node ranks exactly like one that
	// looked and found nothing.
	Looked bool
	// Received is when the coordinator stored the last report (its clock);
	// staleness is judged on it alone. ReportTime is the agent's clock.
	Received   time.Time
	ReportTime time.Time
	// CacheFree and CacheTotal are the fetch cache's room in bytes;
	// CacheTotal 0 means unknown (the agent could not tell).
	CacheFree  int64
	CacheTotal int64
	// HFCacheFree and HFCacheTotal are the room of the node's Hugging
	// Face cache, where Hub models are fetched, when it is on another
	// filesystem than the fetch cache; HFCacheTotal 0 means it is not
	// (or the agent did not say), and the cache's room is its room.
	HFCacheFree  int64
	HFCacheTotal int64
	// GPUMemory is the node's total GPU memory in bytes, 0 when unknown.
	GPUMemory int64
	// Holdings are the reported weights that are catalog models, complete
	// or not.
	Holdings []Holding
	// Fetches are the fetches in progress on the node.
	Fetches []Fetch
	// SlurmState is the node's state as sinfo prints it (%T: "idle",
	// "drained", "down*"...), set by the coordinator when it reads Slurm;
	// "" when unknown, which counts as schedulable.
	SlurmState string
}

// Room is the room a fetch of m has on n, in bytes (total 0: unknown),
// and where that is: a Hub model's Hugging Face cache when the node
// reported it on a filesystem of its own (a filer's), else the fetch
// cache.
func (n *Node) Room(m catalog.Model) (free, total int64, where string) {
	if m.IsHub() && n.HFCacheTotal > 0 {
		return n.HFCacheFree, n.HFCacheTotal, "Hugging Face cache"
	}
	return n.CacheFree, n.CacheTotal, "cache"
}

// Holding is one reported weight that is a catalog model.
type Holding struct {
	Model    string
	Path     string
	Size     int64
	Shared   bool
	Complete bool
	Problem  string // why not complete
}

// Fetch is one fetch in progress, as last reported.
type Fetch struct {
	Source string
	Done   int64
	Total  int64 // -1 when the origin did not say
	Rate   float64
	// Started and Progressed (the last byte) are on the agent's clock.
	Started, Progressed time.Time
}

// State says whether n is fresh, stale or never looked, as of now.
// Staleness wins: a stale node's last word on anything is not trusted.
func (n *Node) State(now time.Time, staleAfter time.Duration) State {
	switch {
	case now.Sub(n.Received) > staleAfter:
		return StateStale
	case !n.Looked:
		return StateNeverLooked
	}
	return StateOK
}

// Schedulable says whether Slurm would start a job on n; see Schedulable.
func (n *Node) Schedulable() bool { return Schedulable(n.SlurmState) }

// Schedulable says whether Slurm starts new jobs on a node in state (sinfo
// %T, lower case, with its suffixes). Unknown ("") is schedulable: llmgw
// without Slurm state must not push every job off every node. DOWN, DRAINED
// or DRAINING, FAIL, FUTURE, REBOOT, UNKNOWN (never registered) and a
// node not responding ("*") get no new job; a powered-down node ("~") is
// one Slurm powers up for a job, so it stays schedulable;
// such a node keeps its llmgw features (Slurm will not place there anyway,
// and they are true) but is no holder in placement.
func Schedulable(state string) bool {
	s := strings.ToLower(strings.TrimSpace(state))
	if s == "" {
		return true
	}
	if strings.HasSuffix(s, "*") {
		return false
	}
	s = strings.TrimRight(s, "~#!%$@^-+")
	for _, bad := range []string{"down", "drain", "fail", "future", "inval", "reboot", "unknown", "power_down", "powered_down", "powering_down"} {
		if strings.HasPrefix(s, bad) {
			return false
		}
	}
	return true
}

// NodeHolding is one node's view of one model.
type NodeHolding struct {
	// Hold is HoldLocal when the node has a complete local copy (the one a
	// job should use), else HoldShared for a complete copy on a shared
	// filesystem, else HoldNone. It is what the node last reported, fresh
	// or not.
	Hold Hold
	Path string // where the complete copy is; "" with HoldNone
	Size int64
	// Shared is true when the node sees a complete copy on a shared
	// filesystem too, beside a local one (Hold is then HoldLocal).
	Shared bool
	// Incomplete is "path: problem" of an incomplete copy, when the node has
	// no complete one.
	Incomplete string
}

// Holding says how n holds model (a catalog name).
func (n *Node) Holding(model string) NodeHolding {
	var h NodeHolding
	h.Hold = HoldNone
	for _, w := range n.Holdings {
		if w.Model != model {
			continue
		}
		switch {
		case w.Complete && !w.Shared:
			h.Hold, h.Path, h.Size = HoldLocal, w.Path, w.Size
		case w.Complete:
			h.Shared = true
			if h.Hold == HoldNone {
				h.Hold, h.Path, h.Size = HoldShared, w.Path, w.Size
			}
		case h.Incomplete == "":
			h.Incomplete = w.Path + ": " + w.Problem
			if w.Problem == "" {
				h.Incomplete = w.Path + ": incomplete"
			}
		}
	}
	if h.Hold != HoldNone {
		h.Incomplete = ""
	}
	return h
}

// Serves returns the catalog models n can serve now without fetching (a
// complete copy, local or on a shared filesystem), sorted and each once.
// A stale node serves nothing: a promise that the weights are there now
// cannot rest on a report that old.
func (n *Node) Serves(now time.Time, staleAfter time.Duration) []string {
	if n.State(now, staleAfter) == StateStale {
		return nil
	}
	var out []string
	for _, w := range n.Holdings {
		if w.Complete && w.Model != "" {
			out = append(out, w.Model)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Features returns the llmgw features n should carry now:
// FeaturePrefix+model for every model it can serve without fetching, sorted.
// A stale node carries none. A node Slurm has DOWN or DRAINED keeps its
// features: Slurm places nothing there, and they are still true.
func Features(n *Node, now time.Time, staleAfter time.Duration) []string {
	models := n.Serves(now, staleAfter)
	if len(models) == 0 {
		return nil
	}
	out := make([]string, len(models))
	for i, m := range models {
		out[i] = FeaturePrefix + m
	}
	return out
}

// FindFetch returns n's fetch of source, or nil.
func (n *Node) FindFetch(source string) *Fetch {
	for i := range n.Fetches {
		if n.Fetches[i].Source == source {
			return &n.Fetches[i]
		}
	}
	return nil
}

// FindModelFetch returns n's fetch of m's weights, or nil: of its source,
// or, for a model of several files, of whichever file is being fetched
// (they are fetched one after another).
func (n *Node) FindModelFetch(m catalog.Model) *Fetch {
	if f := n.FindFetch(m.Source); f != nil {
		return f
	}
	for _, file := range m.Files {
		if f := n.FindFetch(file.Source); f != nil {
			return f
		}
	}
	return nil
}

// Progress is how a fetch is going, as of some moment.
type Progress struct {
	// Since is how long since the last byte arrived.
	Since time.Duration
	// Stalled is Since over the stall threshold: stuck, not slow.
	Stalled bool
	// Percent is done of total, -1 when the total is unknown.
	Percent float64
	// ETA is the time left at the reported rate, -1 when unknown (no total,
	// no rate, or stalled).
	ETA time.Duration
}

// FetchProgress judges f, a fetch n reported, as of now. How long since the
// last byte is measured on two clocks, each against itself: the agent's
// (report time minus last progress) and the coordinator's (now minus when
// the report arrived), so a node whose clock is off is still judged right.
func FetchProgress(n *Node, f Fetch, now time.Time, stallAfter time.Duration) Progress {
	p := Progress{Percent: -1, ETA: -1}
	last := f.Progressed
	if last.IsZero() {
		last = f.Started
	}
	p.Since = now.Sub(n.Received)
	if !last.IsZero() && !n.ReportTime.IsZero() && n.ReportTime.After(last) {
		p.Since += n.ReportTime.Sub(last)
	}
	p.Stalled = p.Since > stallAfter
	if f.Total > 0 {
		p.Percent = 100 * float64(f.Done) / float64(f.Total)
		if f.Rate > 0 && !p.Stalled && f.Done <= f.Total {
			p.ETA = time.Duration(float64(f.Total-f.Done) / f.Rate * float64(time.Second))
		}
	}
	return p
}

// Catalog is the model catalog indexed the ways placement asks it.
type Catalog struct {
	// Models is the catalog in name order. Model indexes elsewhere in this
	// package (Fold's groups) index it.
	Models   []catalog.Model
	index    map[string]int
	bySource map[string]int
}

// NewCatalog indexes models (it sorts a copy by name).
func NewCatalog(models []catalog.Model) *Catalog {
	c := &Catalog{Models: slices.Clone(models), index: make(map[string]int, len(models)),
		bySource: make(map[string]int, len(models))}
	slices.SortFunc(c.Models, func(a, b catalog.Model) int { return strings.Compare(a.Name, b.Name) })
	for i, m := range c.Models {
		c.index[m.Name] = i
		c.bySource[m.Source] = i
	}
	return c
}

// Index returns the index of the model named name.
func (c *Catalog) Index(name string) (int, bool) {
	i, ok := c.index[name]
	return i, ok
}

// Fetchable says whether a job on a node without m could fetch it: only a
// remote source is fetched; a path is checked, never fetched, and a bare
// model id is left to the engine.
func Fetchable(m catalog.Model) bool { return catalog.KindOf(m.Source) == catalog.KindRemote }

// FetchBytes is what a job on a node without m would fetch: the catalog
// size, else the largest complete copy seen anywhere (largest), else -1 when
// nobody knows.
func FetchBytes(m catalog.Model, largest int64) int64 {
	switch {
	case m.Size > 0:
		return m.Size
	case largest > 0:
		return largest
	}
	return -1
}
