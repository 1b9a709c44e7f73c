// Command evict replays a cluster's jobs against the node caches twice, once
// with plain LRU eviction and once with llmgw's policy (weights/evict.Plan,
// the code the agent runs), and prints the two side by side.
//
// The cluster: 64 nodes in 4 fabrics of 16; 40 models whose sizes spread
// from 4 to 140 GB (scaled: one unit is a GB, the policy only compares
// them); every node's cache a share of the catalog's bytes (-shares). The
// jobs: -jobs of them, one a minute, each a model drawn Zipf over the
// models and a node set (1, 2, 4 or 8 nodes) inside one fabric, running
// 30 to 240 minutes. A fabric reads the origin for a job only when none of
// its nodes holds the model complete (the swarm: one origin read per
// fabric, the rest from peers), so a fabric's last copy is what saves
// origin bytes. Both policies see the same jobs, drawn from -seed.
//
// Counted per policy: bytes read from the origin; warm starts (jobs whose
// every node already held the model); evictions; evictions of a file a
// running job uses; evictions of a fabric's last copy of a model used in
// that fabric within keep_last_copy_for; jobs refused (fewer nodes of the
// fabric than the job asks could hold the model or make room for it).
// Placement takes each job's nodes from one draw of the fabric's nodes,
// the first that hold the model or can make room, as llmgw's placement
// does with the room each agent reports, holders of the model first (its
// features and --prefer).
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmgw/llmgw/weights/evict"
)

const (
	nodes      = 64
	fabrics    = 4
	models     = 40
	perFabric  = nodes / fabrics
	minuteStep = time.Minute
)

type job struct {
	model int
	order []int // the fabric's nodes in the order placement would try them
	k     int   // nodes the job asks for
	nodes []int // the nodes it ran on, set by replay
	start time.Time
	end   time.Time
}

type copyOf struct {
	lastUsed time.Time
	written  time.Time
}

type node struct {
	fabric int
	cache  map[int]*copyOf // model → copy
	used   int64
}

type counts struct {
	origin, warm, evictions, inUse, lastCopy, refused int64
}

// policy chooses which of node n's models go to free need units for job j.
type policy interface {
	name() string
	choose(c *cluster, n int, need int64, now time.Time) ([]int, bool)
}

type cluster struct {
	size      []int64
	nodes     []*node
	running   []job // jobs not yet ended, for in-use
	fabUsed   [fabrics]map[int]time.Time
	keep      time.Duration
	cacheSize int64
}

func (c *cluster) inUse(n, m int, now time.Time) bool {
	for _, j := range c.running {
		if j.model != m || !now.Before(j.end) {
			continue
		}
		for _, x := range j.nodes {
			if x == n {
				return true
			}
		}
	}
	return false
}

// others is how many other nodes of n's fabric hold m.
func (c *cluster) others(n, m int) int {
	f := c.nodes[n].fabric
	k := 0
	for x := f * perFabric; x < (f+1)*perFabric; x++ {
		if x != n && c.nodes[x].cache[m] != nil {
			k++
		}
	}
	return k
}

// placement is the order nodes are tried for j: as llmgw's placement
// ranks them, holders of the model first, each group in the draw's order.
func (c *cluster) placement(j job) []int {
	out := make([]int, 0, len(j.order))
	for _, held := range []bool{true, false} {
		for _, n := range j.order {
			if (c.nodes[n].cache[j.model] != nil) == held {
				out = append(out, n)
			}
		}
	}
	return out
}

type lru struct{}

func (lru) name() string { return "plain LRU" }

// choose takes the least recently used models, knowing nothing of jobs or
// fabrics: the cache of a downloader that evicts by last access.
func (lru) choose(c *cluster, n int, need int64, now time.Time) ([]int, bool) {
	nd := c.nodes[n]
	ms := make([]int, 0, len(nd.cache))
	for m := range nd.cache {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool {
		a, b := nd.cache[ms[i]], nd.cache[ms[j]]
		if !a.lastUsed.Equal(b.lastUsed) {
			return a.lastUsed.Before(b.lastUsed)
		}
		return ms[i] < ms[j]
	})
	var out []int
	var freed int64
	for _, m := range ms {
		if freed >= need {
			break
		}
		out = append(out, m)
		freed += c.size[m]
	}
	return out, freed >= need
}

type llmgw struct{}

func (llmgw) name() string { return "llmgw" }

// choose asks weights/evict.Plan, with what the coordinator would answer.
func (llmgw) choose(c *cluster, n int, need int64, now time.Time) ([]int, bool) {
	nd := c.nodes[n]
	entries := make([]evict.Entry, 0, len(nd.cache))
	fab := evict.Fabric{Others: map[string]int{}, LastUsed: map[string]time.Time{}}
	for m, cp := range nd.cache {
		name := strconv.Itoa(m)
		e := evict.Entry{Name: name, Size: c.size[m], Class: evict.Wanted, Model: name, LastUsed: cp.lastUsed, Written: cp.written}
		if c.inUse(n, m, now) {
			e.InUse = "a running job"
		}
		entries = append(entries, e)
		fab.Others[name] = c.others(n, m)
		if t, ok := c.fabUsed[nd.fabric][m]; ok {
			fab.LastUsed[name] = t
		}
	}
	res := evict.Plan(entries, need, fab, evict.Policy{Now: now, KeepLastCopyFor: c.keep})
	var out []int
	for _, d := range res.Evict {
		m, _ := strconv.Atoi(d.Name)
		out = append(out, m)
	}
	return out, res.Short == 0
}

func sizes() []int64 {
	s := make([]int64, models)
	for i := range s {
		// 4 to 140 GB, spread geometrically.
		s[i] = int64(math.Round(4 * math.Pow(140.0/4, float64(i)/float64(models-1))))
	}
	return s
}

func draw(seed uint64, n int) ([]job, []int64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	size := sizes()
	// Popularity is independent of size: a shuffled rank for each model.
	rank := r.Perm(models)
	t0 := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	jobs := make([]job, n)
	for i := range jobs {
		// Zipf with s = 1.1 over ranks 0..39, by inversion of the weights.
		m := rank[zipf(r, 1.1, models)]
		k := []int{1, 1, 1, 1, 1, 2, 2, 2, 4, 8}[r.IntN(10)]
		f := r.IntN(fabrics)
		order := r.Perm(perFabric)
		for x := range order {
			order[x] += f * perFabric
		}
		start := t0.Add(time.Duration(i) * minuteStep)
		jobs[i] = job{model: m, order: order, k: k, start: start, end: start.Add(time.Duration(30+r.IntN(211)) * time.Minute)}
	}
	return jobs, size
}

func zipf(r *rand.Rand, s float64, n int) int {
	var total float64
	for k := 1; k <= n; k++ {
		total += 1 / math.Pow(float64(k), s)
	}
	u := r.Float64() * total
	for k := 1; k <= n; k++ {
		u -= 1 / math.Pow(float64(k), s)
		if u <= 0 {
			return k - 1
		}
	}
	return n - 1
}

func replay(jobs []job, size []int64, share float64, keep time.Duration, p policy) counts {
	var total int64
	for _, s := range size {
		total += s
	}
	c := &cluster{size: size, keep: keep, cacheSize: int64(share * float64(total))}
	for f := range c.fabUsed {
		c.fabUsed[f] = map[int]time.Time{}
	}
	for i := range nodes {
		c.nodes = append(c.nodes, &node{fabric: i / perFabric, cache: map[int]*copyOf{}})
	}
	var k counts
	for _, j := range jobs {
		now := j.start
		live := c.running[:0]
		for _, r := range c.running {
			if now.Before(r.end) {
				live = append(live, r)
			}
		}
		c.running = live
		f := c.nodes[j.order[0]].fabric
		// Placement: the first k nodes of the draw that hold the model or
		// can make room for it (the agent reports the room it could make;
		// placement's disk check skips a node that cannot). Plain LRU can
		// always make room.
		// Each node evicts as it is chosen, so the next node's question to
		// the coordinator already counts one holder fewer (the
		// coordinator counts an eviction it answered as under way).
		inFabric := false
		for x := f * perFabric; x < (f+1)*perFabric; x++ {
			if c.nodes[x].cache[j.model] != nil {
				inFabric = true
			}
		}
		var chosen []int
		warm := true
		for _, n := range c.placement(j) {
			if len(chosen) == j.k {
				break
			}
			nd := c.nodes[n]
			if nd.cache[j.model] != nil {
				chosen = append(chosen, n)
				continue
			}
			if need := nd.used + size[j.model] - c.cacheSize; need > 0 {
				victims, ok := p.choose(c, n, need, now)
				if !ok {
					continue
				}
				for _, m := range victims {
					k.evictions++
					if c.inUse(n, m, now) {
						k.inUse++
					}
					if t, used := c.fabUsed[f][m]; used && now.Sub(t) < keep && c.others(n, m) == 0 {
						k.lastCopy++
					}
					nd.used -= size[m]
					delete(nd.cache, m)
				}
			}
			warm = false
			chosen = append(chosen, n)
		}
		if len(chosen) < j.k {
			// Charged as if it ran elsewhere and read the origin when its
			// fabric has no copy: a refusal must not flatter the policy.
			k.refused++
			if !inFabric {
				k.origin += size[j.model]
			}
			continue
		}
		if warm {
			k.warm++
		}
		if !inFabric {
			k.origin += size[j.model]
		}
		j.nodes = chosen
		for _, n := range chosen {
			nd := c.nodes[n]
			if cp := nd.cache[j.model]; cp != nil {
				cp.lastUsed = now
				continue
			}
			nd.cache[j.model] = &copyOf{lastUsed: now, written: now}
			nd.used += size[j.model]
		}
		c.fabUsed[f][j.model] = now
		c.running = append(c.running, j)
	}
	return k
}

func main() {
	seed := flag.Uint64("seed", 27, "the seed the jobs are drawn from")
	n := flag.Int("jobs", 10000, "jobs to replay")
	keep := flag.Duration("keep-last-copy-for", 24*time.Hour, "keep_last_copy_for (the replay runs a job a minute: 10,000 jobs are about a week)")
	shares := flag.String("shares", "10,20,40", "each node's cache, in percent of the catalog's bytes, one row each")
	flag.Parse()
	jobs, size := draw(*seed, *n)
	var total int64
	for _, s := range size {
		total += s
	}
	fmt.Printf("replay: %d nodes in %d fabrics, %d models (%d to %d GB, %d GB in all), %d jobs (Zipf s=1.1, seed %d), keep_last_copy_for %s\n\n",
		nodes, fabrics, models, size[0], size[models-1], total, *n, *seed, *keep)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cache/node\tpolicy\torigin GB\tvs LRU\twarm starts\tevictions\tof a file in use\tof a fabric's last copy (recent)\tjobs refused\t")
	worse := false
	for _, s := range strings.Split(*shares, ",") {
		pct, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || pct <= 0 || pct > 100 {
			fmt.Fprintf(os.Stderr, "evict: -shares %q: want percents such as 10,20,40\n", *shares)
			os.Exit(2)
		}
		base := replay(jobs, size, float64(pct)/100, *keep, lru{})
		ours := replay(jobs, size, float64(pct)/100, *keep, llmgw{})
		for _, r := range []struct {
			p policy
			k counts
		}{{lru{}, base}, {llmgw{}, ours}} {
			ratio := float64(r.k.origin) / float64(max(base.origin, 1))
			fmt.Fprintf(tw, "%d%%\t%s\t%d\t%.2f×\t%d\t%d\t%d\t%d\t%d\t\n", pct, r.p.name(), r.k.origin, ratio, r.k.warm, r.k.evictions, r.k.inUse, r.k.lastCopy, r.k.refused)
		}
		if ours.origin > base.origin || ours.warm < base.warm || ours.inUse > 0 || ours.lastCopy > 0 {
			worse = true
		}
	}
	tw.Flush()
	fmt.Println("\njobs refused: fewer nodes of the job's fabric than it asked could hold the model or make room without evicting a file in use or a recent last copy; plain LRU refuses none because it evicts those (the columns before). A refused job counts no warm start, and its model's bytes as read from the origin when its fabric held no copy.")
	fmt.Println("goals: origin GB ≤ 0.70× LRU at 20% and no row above 1.00×; warm starts ≥ LRU's; 0 evictions of a file in use; 0 of a fabric's last copy of a model used within keep_last_copy_for")
	if worse {
		fmt.Println("MISSED: a row is worse than plain LRU or evicted what it must not")
		os.Exit(1)
	}
}
