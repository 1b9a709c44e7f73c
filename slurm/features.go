package slurm

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Node features are set with `scontrol update NodeName=LIST
// AvailableFeatures=… ActiveFeatures=…`, which replaces the node's whole
// set, slurm.conf's Feature= included; `scontrol reconfigure` and a plain
// slurmctld restart put slurm.conf's back (docs/slurm/behaviour.md §2). So whoever
// owns some features must rewrite them together with everyone else's, and
// do it again whenever Slurm forgets. PlanFeatures computes those calls,
// ApplyFeatures makes them.

// FeatureUpdate is one scontrol call: the same feature sets for every node
// in Nodes.
type FeatureUpdate struct {
	// Nodes are the nodes the call sets, in natural order (n2 before n10).
	Nodes []string
	// Available and Active are the sets the nodes get, whole.
	Available, Active []string
}

// Args is the argument vector of the call, after "scontrol". The node list
// is one compressed hostlist: 1000 nodes in one call take 0.06 s, one call
// per node 5.5 s (docs/slurm/behaviour.md §3).
func (u FeatureUpdate) Args() []string {
	return []string{"update", "NodeName=" + Compress(u.Nodes),
		"AvailableFeatures=" + strings.Join(u.Available, ","),
		"ActiveFeatures=" + strings.Join(u.Active, ",")}
}

// String is the call as a shell command an operator can paste: each value
// that a shell would split or expand (a hostlist's brackets are a glob) is
// single-quoted.
func (u FeatureUpdate) String() string {
	args := u.Args()
	out := make([]string, 0, len(args)+1)
	out = append(out, "scontrol")
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			out = append(out, k+"="+shellQuote(v))
		} else {
			out = append(out, shellQuote(a))
		}
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s == "" {
		return s
	}
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-=,:/+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// FeaturePlan is what it takes to give every node its desired owned
// features.
type FeaturePlan struct {
	// Updates has one call per distinct resulting (available, active)
	// pair, in the natural order of each call's first node. Nodes already
	// right are in none.
	Updates []FeatureUpdate
	// Unchanged counts the nodes that need no call.
	Unchanged int
	// Unknown are nodes with desired features that Slurm does not list
	// (not in slurm.conf, or FUTURE); nothing is done for them.
	Unknown []string
	// From is the nodes as read for the plan: ApplyFeatures reads back
	// only the nodes it changed and takes the rest from here.
	From []Node
}

// Drifted is how many nodes the plan changes.
func (p FeaturePlan) Drifted() int {
	n := 0
	for _, u := range p.Updates {
		n += len(u.Nodes)
	}
	return n
}

// Commands are the plan's calls as shell commands (FeatureUpdate.String).
func (p FeaturePlan) Commands() []string {
	out := make([]string, len(p.Updates))
	for i, u := range p.Updates {
		out[i] = u.String()
	}
	return out
}

// PlanFeatures computes the calls that give each node in nodes (as read
// from Slurm) the features desired[node] for the features it owns, those
// starting with prefix, and leaves every other feature exactly as it is:
//
//	new = (current − features with prefix) ∪ desired
//
// for the available and the active set alike. A node missing from desired
// loses its owned features. A node whose sets are already right (in any
// order) gets no call; nodes that end with the same sets share one.
// Desired features must start with prefix; others are ignored, since a
// feature llmgw does not own is not llmgw's to add.
func PlanFeatures(nodes []Node, prefix string, desired map[string][]string) FeaturePlan {
	var plan FeaturePlan
	known := make(map[string]bool, len(nodes))
	groups := map[string]*FeatureUpdate{}
	for _, n := range nodes {
		known[n.Name] = true
		want := ownedSet(desired[n.Name], prefix)
		avail := append(notOwned(n.Available, prefix), want...)
		active := append(notOwned(n.Active, prefix), want...)
		if sameSet(avail, n.Available) && sameSet(active, n.Active) {
			plan.Unchanged++
			continue
		}
		key := strings.Join(avail, ",") + "\x00" + strings.Join(active, ",")
		g := groups[key]
		if g == nil {
			g = &FeatureUpdate{Available: avail, Active: active}
			groups[key] = g
		}
		g.Nodes = append(g.Nodes, n.Name)
	}
	for name := range desired {
		if !known[name] && len(ownedSet(desired[name], prefix)) > 0 {
			plan.Unknown = append(plan.Unknown, name)
		}
	}
	SortNodeNames(plan.Unknown)
	for _, g := range groups {
		SortNodeNames(g.Nodes)
		plan.Updates = append(plan.Updates, *g)
	}
	sort.Slice(plan.Updates, func(i, j int) bool {
		return NodeLess(plan.Updates[i].Nodes[0], plan.Updates[j].Nodes[0])
	})
	plan.From = nodes
	return plan
}

// notOwned returns the features of fs without prefix, de-duplicated, in
// their order: the admin's, which are kept as they are.
func notOwned(fs []string, prefix string) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		if f != "" && !strings.HasPrefix(f, prefix) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// ownedSet returns the features of fs with prefix, sorted and unique.
func ownedSet(fs []string, prefix string) []string {
	var out []string
	for _, f := range fs {
		if strings.HasPrefix(f, prefix) && len(f) > len(prefix) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sameSet says whether a and b hold the same features, ignoring order and
// repeats: Slurm keeps the order it was given, and a set written in
// another order is not drift.
func sameSet(a, b []string) bool {
	sa, sb := slices.Clone(a), slices.Clone(b)
	slices.Sort(sa)
	slices.Sort(sb)
	return slices.Equal(slices.Compact(sa), slices.Compact(sb))
}

// FeatureResult is what ApplyFeatures did.
type FeatureResult struct {
	// Calls is how many scontrol calls were made.
	Calls int
	// Errors has one entry per failed call. A failed call may still have
	// changed some of its nodes: a bad name in a list fails the call but
	// the valid nodes are updated (docs/slurm/behaviour.md §2), so Nodes says what holds.
	Errors []error
	// Nodes is Slurm's state read back after the calls (nil when no call
	// was made, or the read failed: then ReadErr says why).
	Nodes   []Node
	ReadErr error
	// Wrong lists the planned nodes whose features, read back, are not
	// what the plan set (the call failed, or someone changed them since).
	Wrong []string
}

// Err summarises the result as one error, or nil when every call worked
// and every node read back as planned.
func (r FeatureResult) Err() error {
	var msgs []string
	for _, e := range r.Errors {
		msgs = append(msgs, e.Error())
	}
	if r.ReadErr != nil {
		msgs = append(msgs, "reading the features back: "+r.ReadErr.Error())
	}
	if len(r.Wrong) > 0 {
		msgs = append(msgs, fmt.Sprintf("%d node(s) read back with other features than set: %s", len(r.Wrong), Compress(r.Wrong)))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// ApplyFeatures makes the plan's calls, one after another (slurmctld takes
// node updates one at a time anyway), then reads the changed nodes back
// (readBack) and checks them. It goes on after a failed call: the other
// groups are independent of it.
func (r *Runner) ApplyFeatures(ctx context.Context, plan FeaturePlan) FeatureResult {
	var res FeatureResult
	if len(plan.Updates) == 0 {
		return res
	}
	for _, u := range plan.Updates {
		if ctx.Err() != nil {
			res.Errors = append(res.Errors, ctx.Err())
			break
		}
		res.Calls++
		if _, err := r.Run(ctx, "scontrol", u.Args()...); err != nil {
			res.Errors = append(res.Errors, err)
		}
	}
	res.Nodes, res.ReadErr = r.readBack(ctx, plan)
	if res.ReadErr != nil {
		return res
	}
	byName := make(map[string]*Node, len(res.Nodes))
	for i := range res.Nodes {
		byName[res.Nodes[i].Name] = &res.Nodes[i]
	}
	for _, u := range plan.Updates {
		for _, name := range u.Nodes {
			n := byName[name]
			if n == nil || !sameSet(n.Available, u.Available) || !sameSet(n.Active, u.Active) {
				res.Wrong = append(res.Wrong, name)
			}
		}
	}
	SortNodeNames(res.Wrong)
	return res
}

// readBack reads Slurm's nodes after the plan's calls. Only the changed
// ones are asked for, with `sinfo -N -n HOSTLIST` in the text form, since
// 22.05's sinfo --json ignores -n (docs/slurm/behaviour.md §8): every read
// of every node is slurmctld's work, and each sync already read them all.
// The rest are as read for the plan. Every node is read (sinfo --json) when
// the plan was not made from a read, when a planned feature holds a
// character the text form splits on, or when the text read fails or lacks
// a changed node: the answer is never less than the full read's.
func (r *Runner) readBack(ctx context.Context, plan FeaturePlan) ([]Node, error) {
	var names []string
	textSafe := plan.From != nil
	for _, u := range plan.Updates {
		names = append(names, u.Nodes...)
		for _, f := range append(slices.Clone(u.Available), u.Active...) {
			textSafe = textSafe && !strings.ContainsAny(f, "|,\n")
		}
	}
	if textSafe {
		if merged, ok := r.readBackChanged(ctx, plan.From, names); ok {
			return merged, nil
		}
	}
	return r.Nodes(ctx)
}

// readBackChanged reads names with the text form and returns from with
// those nodes' features and states replaced; false when the read fails or
// lacks one of them.
func (r *Runner) readBackChanged(ctx context.Context, from []Node, names []string) ([]Node, bool) {
	out, err := r.Run(ctx, "sinfo", "-a", "-N", "-h", "-n", Compress(names), "-o", "%N|%f|%b|%T")
	if err != nil {
		return nil, false
	}
	read, err := ParseNodes(out)
	if err != nil {
		return nil, false
	}
	byName := make(map[string]Node, len(read))
	for _, n := range read {
		byName[n.Name] = n
	}
	for _, name := range names {
		if _, ok := byName[name]; !ok {
			return nil, false
		}
	}
	merged := slices.Clone(from)
	for i, n := range merged {
		if c, ok := byName[n.Name]; ok {
			merged[i].Available, merged[i].Active, merged[i].State = c.Available, c.Active, c.State
		}
	}
	return merged, true
}

// NodeLess orders node names the way people and sinfo do: by the text
// before the trailing number, then by the number, so n2 comes before n10.
func NodeLess(a, b string) bool {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if pa != pb {
		return pa < pb
	}
	if len(na) != len(nb) {
		return len(na) < len(nb)
	}
	return na < nb
}

// SortNodeNames sorts names in place by NodeLess.
func SortNodeNames(names []string) {
	sort.Slice(names, func(i, j int) bool { return NodeLess(names[i], names[j]) })
}
