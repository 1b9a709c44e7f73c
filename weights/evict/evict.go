// Package evict decides what a node's fetch cache gives up when it runs
// short of room, and how much room a fetch may claim. It sits beside gc:
// gc removes what no catalog entry wants, when asked or when an Epilog
// finds it due; eviction removes, under pressure only, what llmgw fetched,
// wanted or not, in an order that costs the cluster least.
//
// Removing a node's copy of a model is cheap when another node of its
// fabric holds one (the next job there reads it from that peer) and
// expensive when it is the fabric's last (the next job reads the origin
// again, over the management network). So the order is:
//
//  1. files no catalog entry wants, oldest first;
//  2. superseded revisions (an older revision of a model the catalog still
//     lists, or bytes that no longer match a model's pin), least recently
//     used first;
//  3. files the catalog wants, least recently used by a job first, copies
//     another node of the fabric also holds before last copies;
//
// and within each class, first what a prefetch brought that no job has
// used since (Entry.Prefetched): a guess about a job that has not come
// yet costs the cluster less than a copy a job has shown it wants;
//
// and it never removes a file a running job's record names, a file a fetch
// is writing, or the last complete copy in its fabric of a model a job
// used within KeepLastCopyFor. Whether a copy is the last is the
// coordinator's knowledge (who holds what, per fabric), asked through the
// agent; without an answer every copy of a recently used model counts as
// possibly the last, and is kept.
//
// The package decides; it does not look at disks or networks. The agent
// gathers the entries (agent/evict.go), asks the coordinator, calls Plan,
// and removes what Plan chose through gc's checks. The replay benchmark
// (scripts/bench/evict.sh) calls the same Plan. Like every package under
// weights/, it imports no other llmgw package but weights/catalog.
package evict

import (
	"fmt"
	"sort"
	"time"
)

// Class is what an entry is to the catalog; eviction takes lower classes
// first.
type Class int

const (
	// Unwanted: no catalog entry wants it.
	Unwanted Class = iota
	// Superseded: an older revision of a model the catalog still lists (a
	// source an admin replaced, an HF snapshot whose ref moved on), or a
	// wanted name whose bytes no longer match the catalog's pin.
	Superseded
	// Wanted: the catalog wants it as it is.
	Wanted
)

func (c Class) String() string {
	switch c {
	case Unwanted:
		return "unwanted"
	case Superseded:
		return "superseded"
	case Wanted:
		return "wanted"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Entry is one thing in the cache that eviction may remove whole: a file,
// a set directory, or (for the hub's layout) a snapshot.
type Entry struct {
	// Name is the entry's name in the cache directory.
	Name  string
	Size  int64
	Class Class
	// Model is the catalog model it belongs to: the one that wants it
	// (Wanted) or wanted it (Superseded); "" for Unwanted.
	Model string
	// LastUsed is when a job on this node last used it (zero: never seen).
	LastUsed time.Time
	// Written is when it was last written (a fetch's end).
	Written time.Time
	// InUse names the running job whose record names it; never evicted.
	InUse string
	// Fetching says a fetch is under way in it; never evicted.
	Fetching bool
	// Prefetched says a prefetch brought it (issue 28) and no job on the
	// node has used it since: within its class, it goes first.
	Prefetched bool
}

// used is when the entry was last wanted: a use, or its fetch.
func (e Entry) used() time.Time {
	if e.LastUsed.After(e.Written) {
		return e.LastUsed
	}
	return e.Written
}

// Fabric is what the coordinator said about this node's fabric. Others
// maps a model to how many other nodes of the fabric hold it complete (a
// shared filer the fabric sees counts as one); LastUsed, when the
// coordinator knows, is the fabric's last use of the model. Err, when set,
// is why there is no answer: then every copy may be the last.
type Fabric struct {
	Others   map[string]int
	LastUsed map[string]time.Time
	Err      error
}

// Policy is how Plan chooses.
type Policy struct {
	// KeepLastCopyFor protects a fabric's last copy of a model a job used
	// within it (0: DefaultKeepLastCopyFor; negative: never protects).
	KeepLastCopyFor time.Duration
	// Now is the time the plan is made at.
	Now time.Time
}

// DefaultKeepLastCopyFor is keep_last_copy_for's default: a week, so a
// model run every weekday keeps a copy in each fabric that runs it.
const DefaultKeepLastCopyFor = 7 * 24 * time.Hour

func (p Policy) keep() time.Duration {
	if p.KeepLastCopyFor == 0 {
		return DefaultKeepLastCopyFor
	}
	return p.KeepLastCopyFor
}

// Decision is what Plan made of one entry.
type Decision struct {
	Entry
	// Evict says the plan removes it.
	Evict bool
	// Reason says why it goes, or why it is kept.
	Reason string
	// LastCopy says it is (or, without an answer, may be) its fabric's
	// last copy of its model.
	LastCopy bool
}

// Result is a plan.
type Result struct {
	// Evict are the entries to remove, in the order to remove them.
	Evict []Decision
	// Held are the entries the plan would not remove, with why; only those
	// it looked at before it had freed enough, and every held one when it
	// could not free enough.
	Held []Decision
	// Freed is the sum of the sizes of Evict.
	Freed int64
	// Short is how many bytes of need the plan could not free.
	Short int64
}

// Plan chooses entries to remove to free need bytes, by the order in the
// package comment, and says of each entry it passed over why. It frees no
// more than need rounds up to whole entries; with need <= 0 it chooses
// nothing.
func Plan(entries []Entry, need int64, fab Fabric, p Policy) Result {
	var res Result
	if need <= 0 {
		return res
	}
	// Copies of one model on this node: one node holds a model once, but
	// a superseded revision and the wanted one are different entries.
	cands := make([]Decision, 0, len(entries))
	for _, e := range entries {
		d := Decision{Entry: e}
		switch {
		case e.InUse != "":
			d.Reason = "in use by " + e.InUse
		case e.Fetching:
			d.Reason = "a fetch is under way in it"
		case e.Class == Wanted:
			d.LastCopy, d.Reason = p.lastCopy(e, fab)
		}
		cands = append(cands, d)
	}
	sort.SliceStable(cands, func(i, j int) bool { return less(cands[i], cands[j]) })
	for _, d := range cands {
		if res.Freed >= need {
			break
		}
		if d.Reason != "" {
			res.Held = append(res.Held, d)
			continue
		}
		d.Evict, d.Reason = true, why(d, fab)
		res.Evict = append(res.Evict, d)
		res.Freed += d.Size
	}
	res.Short = max(0, need-res.Freed)
	return res
}

// lastCopy says whether e, a wanted entry, is (or may be) its fabric's
// last copy, and the reason to keep it when that protects it.
func (p Policy) lastCopy(e Entry, fab Fabric) (bool, string) {
	used := e.LastUsed
	if t, ok := fab.LastUsed[e.Model]; ok && t.After(used) {
		used = t
	}
	recent := p.keep() > 0 && !used.IsZero() && p.Now.Sub(used) < p.keep()
	if fab.Err != nil {
		if recent {
			return true, fmt.Sprintf("may be the last copy in this fabric of model %s, used %s ago (within keep_last_copy_for, %s), and the coordinator did not say otherwise: %v",
				e.Model, roundAgo(p.Now.Sub(used)), p.keep(), fab.Err)
		}
		return true, ""
	}
	if fab.Others[e.Model] > 0 {
		return false, ""
	}
	if recent {
		return true, fmt.Sprintf("the last copy in this fabric of model %s, used %s ago (within keep_last_copy_for, %s)", e.Model, roundAgo(p.Now.Sub(used)), p.keep())
	}
	return true, ""
}

// less orders candidates: by class; within a class, what a prefetch
// brought that no job used first; within the wanted, copies others of the
// fabric also hold before last copies; then least recently used.
func less(a, b Decision) bool {
	if a.Class != b.Class {
		return a.Class < b.Class
	}
	if a.Prefetched != b.Prefetched {
		return a.Prefetched
	}
	if a.Class == Wanted && a.LastCopy != b.LastCopy {
		return !a.LastCopy
	}
	if ua, ub := a.used(), b.used(); !ua.Equal(ub) {
		return ua.Before(ub)
	}
	return a.Name < b.Name
}

// why is the reason an entry goes.
func why(d Decision, fab Fabric) string {
	if d.Prefetched {
		return whyClass(d, fab) + "; a prefetch brought it and no job used it"
	}
	return whyClass(d, fab)
}

func whyClass(d Decision, fab Fabric) string {
	switch d.Class {
	case Unwanted:
		return "no catalog entry wants it"
	case Superseded:
		return "superseded: model " + d.Model + " no longer wants it (an admin replaced or removed it)"
	}
	if d.LastCopy {
		return "least recently used; the last copy in this fabric of model " + d.Model + ", not used within keep_last_copy_for"
	}
	return fmt.Sprintf("least recently used; %d other node(s) of this fabric hold model %s", fab.Others[d.Model], d.Model)
}

func roundAgo(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Hour)
	case d >= time.Minute:
		return d.Round(time.Minute)
	}
	return d.Round(time.Second)
}
