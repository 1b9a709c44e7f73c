package coordinator

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// What a node offers (its AvailableFeatures) is its config record's, the
// same string on every node of the record (slurm.PlanFeatures). A job's
// --prefer or --constraint matches only active features, and a feature
// that no node has active is refused at submit whether nodes offer it or
// not (docs/slurm/behaviour.md §11): offering a model a record's nodes do
// not hold buys a job nothing. It costs every node listing, though: every
// sinfo and scontrol show node carries every node's set, and slurmctld's
// saved node state holds it, so a catalog of 200 models of 64-character
// names on every one of 10,000 nodes was 142 MB a listing. So a record
// offers the features of the models its nodes hold now, and, so that a
// model held and dropped does not rewrite the record every interval, of
// those one of its nodes held within offerHold.

// offerHold is how long a record keeps offering a model after the last of
// its nodes stopped holding it (evicted, gc'd, or stale). Long enough that
// a model a job fetches again after an eviction, or a node that misses a
// few reports, costs no record write; short enough that a model gone from
// a record's nodes leaves every listing the same day. A record write is
// one RPC and a node state save; it is the churn of them, every interval,
// that this spares.
const offerHold = time.Hour

// maxNodeListing is the default bound of what llmgw's AvailableFeatures
// may add to slurmctld's answer to a node listing (sinfo, scontrol show
// node, the reconciler's own reads): slurmctld sends every node's sets in
// one message, which may not pass MAX_MSG_SIZE, 1 GiB (src/common/pack.h;
// checked on receipt in slurm_protocol_socket.c, 22.05 to 26.05): past it
// sinfo fails for everyone. A quarter of it leaves the rest of each node's
// record, the active sets and growth their room. Every model is offered
// below it; feature_listing_max_mb sets a smaller one, at which the
// least-held models are withheld (docs/design.md §3).
const maxNodeListing = 256 << 20

// offers remembers, per node, when it last held each model (wanted its
// feature active), for offerHold. The memory is the coordinator's own: a
// coordinator that starts counts every feature a record offers then as
// held at its start, so that its first runs drop nothing they cannot
// know to be old.
type offers struct {
	hold  time.Duration
	start time.Time
	// held is node → owned feature → when the node last wanted it active.
	held map[string]map[string]time.Time
	// all makes every record offer every catalog model, as llmgw did before
	// it offered per record; the scale benchmark sets it to measure both.
	all bool
}

func newOffers(hold time.Duration) *offers {
	return &offers{hold: hold, held: map[string]map[string]time.Time{}}
}

// begin marks the coordinator's first run, from which what records offer
// then counts as held (keep).
func (o *offers) begin(now time.Time) {
	if o.start.IsZero() {
		o.start = now
	}
}

// note records desired (node → owned features it wants active now) as held
// at now, and forgets what is older than the hold.
func (o *offers) note(now time.Time, desired map[string][]string) {
	o.begin(now)
	for node, fs := range desired {
		m := o.held[node]
		if m == nil {
			m = make(map[string]time.Time, len(fs))
			o.held[node] = m
		}
		for _, f := range fs {
			m[f] = now
		}
	}
	for node, m := range o.held {
		maps.DeleteFunc(m, func(_ string, at time.Time) bool { return now.Sub(at) > o.hold })
		if len(m) == 0 {
			delete(o.held, node)
		}
	}
}

// keep is, per node, the owned features its record goes on offering
// though no node of it wants them active now: those the node held within
// the hold, and, during the hold after the coordinator started, those its
// record offers now. Only catalog models' features (inCatalog) are kept: a
// model gone from the catalog leaves every record at once.
func (o *offers) keep(now time.Time, nodes []slurm.Node, catalog []string) map[string][]string {
	out := make(map[string][]string, len(o.held))
	if o.all {
		fs := make([]string, len(catalog))
		for i, m := range catalog {
			fs[i] = placement.FeaturePrefix + m
		}
		for _, n := range nodes {
			out[n.Name] = fs
		}
		return out
	}
	in := make(map[string]bool, len(catalog))
	for _, m := range catalog {
		in[placement.FeaturePrefix+m] = true
	}
	for node, m := range o.held {
		for f := range m {
			if in[f] {
				out[node] = append(out[node], f)
			}
		}
	}
	if now.Sub(o.start) < o.hold {
		// Once per record: the nodes of one share their set.
		seen := map[*string]bool{}
		for _, n := range nodes {
			if len(n.Available) == 0 || seen[&n.Available[0]] {
				continue
			}
			seen[&n.Available[0]] = true
			for _, f := range n.Available {
				if strings.HasPrefix(f, placement.FeaturePrefix) && in[f] {
					out[n.Name] = append(out[n.Name], f)
				}
			}
		}
	}
	return out
}

// listing is what the owned features a plan would leave available add to
// a node listing, per feature: its name and a comma once per node of every
// record that would offer it. The whole is the sum: what a record offers is
// the union of its nodes' features, so each feature adds its own part.
func listing(nodes []slurm.Node, desired, keep map[string][]string) map[string]int64 {
	cost := map[string]int64{}
	for _, r := range slurm.Records(nodes) {
		set := map[string]bool{}
		for _, i := range r {
			for _, f := range desired[nodes[i].Name] {
				set[f] = true
			}
			for _, f := range keep[nodes[i].Name] {
				set[f] = true
			}
		}
		for f := range set {
			cost[f] += int64(len(f)+1) * int64(len(r))
		}
	}
	return cost
}

// withheldModels are the models whose features are left out so that what
// llmgw adds to a node listing (listing) stays within budget: none while it
// fits; past it the least-held models (by holders, then by name, so that
// the choice is the same every run), until it fits. Their jobs get no
// preference, which loses a hint, never a job. It also returns the bytes
// llmgw's features add to a listing once those are left out. Sorted.
func withheldModels(nodes []slurm.Node, desired, keep map[string][]string, budget int64) (withheld []string, bytes int64) {
	cost := listing(nodes, desired, keep)
	for _, c := range cost {
		bytes += c
	}
	if bytes <= budget {
		return nil, bytes
	}
	holders := map[string]int{}
	for _, fs := range desired {
		for _, f := range fs {
			holders[f]++
		}
	}
	fs := slices.Collect(maps.Keys(cost))
	slices.SortFunc(fs, func(a, b string) int { return cmp.Or(cmp.Compare(holders[a], holders[b]), cmp.Compare(b, a)) })
	for _, f := range fs {
		if bytes <= budget {
			break
		}
		bytes -= cost[f]
		withheld = append(withheld, strings.TrimPrefix(f, placement.FeaturePrefix))
	}
	slices.Sort(withheld)
	return withheld, bytes
}

// withhold drops the withheld features (or models' features) from fs.
func withhold(fs map[string][]string, withheld []string) map[string][]string {
	if len(withheld) == 0 {
		return fs
	}
	drop := make(map[string]bool, len(withheld))
	for _, m := range withheld {
		if !strings.HasPrefix(m, placement.FeaturePrefix) {
			m = placement.FeaturePrefix + m
		}
		drop[m] = true
	}
	out := make(map[string][]string, len(fs))
	for n, l := range fs {
		out[n] = slices.DeleteFunc(slices.Clone(l), func(f string) bool { return drop[f] })
	}
	return out
}
