package slurm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Node features are set with `scontrol update NodeName=LIST
// AvailableFeatures=… ActiveFeatures=…`, which replaces the node's whole
// set, slurm.conf's Feature= included; `scontrol reconfigure` and a plain
// slurmctld restart put slurm.conf's back (docs/slurm/behaviour.md §2). So whoever
// owns some features must rewrite them together with everyone else's, and
// do it again whenever Slurm forgets. PlanFeatures computes those calls,
// ApplyFeatures makes them.
//
// llmgw writes the two sets differently (docs/slurm/behaviour.md §11):
//   - AvailableFeatures is one superset, the site's own features and every
//     feature llmgw may ever set active (one per catalog model), written
//     only a whole node config record at a time. slurmctld keeps
//     AvailableFeatures in its config records, one per NodeName line, and
//     an update that covers only some of a record's nodes splits it in two
//     (update_node_avail_features, src/slurmctld/node_mgr.c, 22.05 to
//     26.05); the scheduler walks every record for every job, and 22.05
//     never merges them again. Covering the whole record updates it in
//     place.
//   - ActiveFeatures carries presence, per node: update_node_active_features
//     only sets the node's bits in slurmctld's per-feature node bitmaps
//     (active_feature_list) and touches no record, and without a
//     NodeFeatures plugin the scheduler matches a job's --constraint and
//     --prefer against those active bitmaps alone (find_feature_nodes,
//     src/slurmctld/node_scheduler.c: the available bitmap is a copy of the
//     active one unless the feature is a plugin's changeable one).
// Distinct presence sets then cost bitmaps, not records, and no model needs
// to be withheld to keep the records few.

// FeatureUpdate is one update RPC: the same values for every node in Nodes.
type FeatureUpdate struct {
	// Nodes are the nodes the call sets, in natural order (n2 before n10).
	Nodes []string
	// Record says the call sets AvailableFeatures too. Nodes are then
	// whole node config records (see PlanFeatures), and Active is sent
	// with it, since without it Slurm (no NodeFeatures plugin) makes
	// the active set equal to the available one (update_node,
	// src/slurmctld/node_mgr.c).
	Record bool
	// Available (when Record) and Active are the sets the nodes get,
	// whole.
	Available, Active []string
}

// Args is the argument vector of the call, after "scontrol". The node list
// is one compressed hostlist: 1000 nodes in one call take 0.06 s, one call
// per node 5.5 s (docs/slurm/behaviour.md §3).
func (u FeatureUpdate) Args() []string {
	args := []string{"update", "NodeName=" + Compress(u.Nodes)}
	if u.Record {
		args = append(args, "AvailableFeatures="+strings.Join(u.Available, ","))
	}
	return append(args, "ActiveFeatures="+strings.Join(u.Active, ","))
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

// PutBack is the calls that give the nodes of now the features they had in
// before (nodes in only one of them are left alone), for a demo or a test
// that ran a coordinator on a cluster it must leave as it found it. Nodes
// that had the same sets go back in one call, and AvailableFeatures only
// where it changed: llmgw writes it a config record at a time, and a record
// put back node by node could be split in slurmctld's memory.
func PutBack(before, now []Node) []FeatureUpdate {
	type sets struct {
		record            bool
		available, active string
	}
	var order []sets
	calls := map[sets]*FeatureUpdate{}
	for _, was := range before {
		i := slices.IndexFunc(now, func(n Node) bool { return n.Name == was.Name })
		if i < 0 || (slices.Equal(now[i].Active, was.Active) && slices.Equal(now[i].Available, was.Available)) {
			continue
		}
		k := sets{!slices.Equal(now[i].Available, was.Available), strings.Join(was.Available, ","), strings.Join(was.Active, ",")}
		if calls[k] == nil {
			calls[k] = &FeatureUpdate{Record: k.record, Available: was.Available, Active: was.Active}
			order = append(order, k)
		}
		calls[k].Nodes = append(calls[k].Nodes, was.Name)
	}
	out := make([]FeatureUpdate, 0, len(order))
	for _, k := range order {
		out = append(out, *calls[k])
	}
	return out
}

// FeaturePlan is what it takes to give every node its desired owned
// features.
type FeaturePlan struct {
	// Records are the AvailableFeatures writes, one per group of whole
	// config records whose available set changes, in the natural order of
	// each call's first node. Each also sets the active features its nodes
	// have in common; they come before Presence, whose active sets must be
	// subsets of the new available ones.
	Records []FeatureUpdate
	// Presence are the ActiveFeatures writes, one per distinct resulting
	// active set of the nodes the Records leave wrong, in the natural
	// order of each call's first node.
	Presence []FeatureUpdate
	// Unchanged counts the nodes that need no call.
	Unchanged int
	// Unknown are nodes with desired features that Slurm does not list
	// (not in slurm.conf, or FUTURE); nothing is done for them.
	Unknown []string
	// From is the nodes as read for the plan: ApplyFeatures reads back
	// only the nodes it changed and takes the rest from here.
	From []Node
}

// Updates are the plan's calls in the order they are made: Records, then
// Presence.
func (p FeaturePlan) Updates() []FeatureUpdate {
	return append(slices.Clone(p.Records), p.Presence...)
}

// Drifted is how many nodes the plan changes.
func (p FeaturePlan) Drifted() int {
	seen := map[string]bool{}
	for _, u := range p.Updates() {
		for _, n := range u.Nodes {
			seen[n] = true
		}
	}
	return len(seen)
}

// Commands are the plan's calls as shell commands (FeatureUpdate.String).
func (p FeaturePlan) Commands() []string {
	ups := p.Updates()
	out := make([]string, len(ups))
	for i, u := range ups {
		out[i] = u.String()
	}
	return out
}

// want is what the plan leaves on one node: its active set, and its
// available set when a record write covers it (nil: left as it was).
type want struct {
	available, active []string
	record            bool
}

// expected is every changed node's sets after the plan, for the read-back.
func (p FeaturePlan) expected() map[string]want {
	out := map[string]want{}
	for _, u := range p.Records {
		for _, name := range u.Nodes {
			out[name] = want{available: u.Available, active: u.Active, record: true}
		}
	}
	for _, u := range p.Presence {
		for _, name := range u.Nodes {
			w := out[name]
			w.active = u.Active
			out[name] = w
		}
	}
	return out
}

// Between is the nodes as From has them, but with only those active
// features each is sure to have while the plan runs: a node keeps, until
// its last call, only what it has now and every call that covers it sets
// (a record write sets the active features its nodes share, before the
// node's own presence call; a presence call drops what the node lost).
// lost says whether a node then lacks, for a while, an owned feature
// (prefix) it has now: the case in which whoever trusts the features
// (job_submit.lua's feature file, which adds a preference only where a
// node has it, and whose preference Slurm refuses when none has) must be
// told the lesser set first.
func (p FeaturePlan) Between(prefix string) (nodes []Node, lost bool) {
	sets := map[string][][]string{}
	for _, u := range p.Updates() {
		for _, n := range u.Nodes {
			sets[n] = append(sets[n], u.Active)
		}
	}
	nodes = slices.Clone(p.From)
	for i, n := range nodes {
		active, ok := sets[n.Name]
		if !ok {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(n.Active), func(f string) bool {
			for _, a := range active {
				if !slices.Contains(a, f) {
					return true
				}
			}
			return false
		})
		if len(ownedSet(kept, prefix)) < len(ownedSet(n.Active, prefix)) {
			lost = true
		}
		nodes[i].Active = kept
	}
	return nodes, lost
}

// PlanFeatures computes the calls that give each node in nodes (as read
// from Slurm) the features desired[node] active, for the features llmgw
// owns (those starting with prefix), and leaves every other feature
// exactly as it is. A node's available set is its config record's:
//
//	available = (current available − owned) ∪ ⋃ over the record's nodes of (desired ∪ keep)
//	active    = (current active − owned) ∪ desired[node]
//
// so a record offers the owned features some node of it has active, and
// those keep names for its nodes besides (features held a while ago, so
// that a model held and dropped does not rewrite the record every
// interval; or every catalog model, as llmgw did before).
//
// AvailableFeatures is written only to whole config records. slurmctld
// shows no record, but without a NodeFeatures plugin every node of a
// record has the record's feature string (update_node_avail_features
// keeps the two in step, splitting the record when it must), so nodes
// whose available sets are equal are whole records (Records): each record
// write covers all nodes with one available set, which updates every
// record among them in place. That holds only if nodes has every node
// slurmctld has with that set, the Unlisted ones (FUTURE, in no partition)
// included: give PlanFeatures those too (UnlistedNodes) whenever a record
// may be written. A record write sets the active features every node of
// it wants, and the rest follows as Presence, one call per distinct set.
//
// A node missing from desired loses its owned active features. A node
// whose sets are already right (in any order) gets no call. Desired and
// kept features must start with prefix; others are ignored, since a
// feature llmgw does not own is not llmgw's to add.
func PlanFeatures(nodes []Node, prefix string, desired, keep map[string][]string) FeaturePlan {
	plan := FeaturePlan{From: nodes}
	known := make(map[string]bool, len(nodes))
	wants := make([][]string, len(nodes))
	for i, n := range nodes {
		known[n.Name] = true
		wants[i] = append(notOwned(n.Active, prefix), ownedSet(desired[n.Name], prefix)...)
	}
	records := Records(nodes)
	// active is each node's active set once the records are written.
	active := make([][]string, len(nodes))
	for i, n := range nodes {
		active[i] = n.Active
	}
	for _, r := range records {
		first := nodes[r[0]]
		var owned []string
		for _, i := range r {
			owned = append(owned, ownedSet(desired[nodes[i].Name], prefix)...)
			owned = append(owned, ownedSet(keep[nodes[i].Name], prefix)...)
		}
		slices.Sort(owned)
		avail := append(notOwned(first.Available, prefix), slices.Compact(owned)...)
		if sameSet(avail, first.Available) {
			continue
		}
		common := slices.Clone(wants[r[0]])
		u := FeatureUpdate{Record: true, Available: avail}
		for _, i := range r {
			common = slices.DeleteFunc(common, func(f string) bool { return !slices.Contains(wants[i], f) })
			u.Nodes = append(u.Nodes, nodes[i].Name)
		}
		u.Active = common
		for _, i := range r {
			active[i] = common
		}
		SortNodeNames(u.Nodes)
		plan.Records = append(plan.Records, u)
	}
	groups := map[string]*FeatureUpdate{}
	changed := map[string]bool{}
	for _, u := range plan.Records {
		for _, name := range u.Nodes {
			changed[name] = true
		}
	}
	for i, n := range nodes {
		if sameSet(wants[i], active[i]) {
			continue
		}
		changed[n.Name] = true
		key := strings.Join(wants[i], ",")
		g := groups[key]
		if g == nil {
			g = &FeatureUpdate{Active: wants[i]}
			groups[key] = g
		}
		g.Nodes = append(g.Nodes, n.Name)
	}
	plan.Unchanged = len(nodes) - len(changed)
	for _, g := range groups {
		SortNodeNames(g.Nodes)
		plan.Presence = append(plan.Presence, *g)
	}
	for name := range desired {
		if !known[name] && len(ownedSet(desired[name], prefix)) > 0 {
			plan.Unknown = append(plan.Unknown, name)
		}
	}
	SortNodeNames(plan.Unknown)
	byFirst := func(a, b FeatureUpdate) int {
		switch {
		case NodeLess(a.Nodes[0], b.Nodes[0]):
			return -1
		case NodeLess(b.Nodes[0], a.Nodes[0]):
			return 1
		}
		return 0
	}
	slices.SortFunc(plan.Records, byFirst)
	slices.SortFunc(plan.Presence, byFirst)
	return plan
}

// Records groups nodes (indexes into nodes) by their available set, in
// the order each set is first met: without a NodeFeatures plugin each
// group is one or more whole config records (PlanFeatures).
func Records(nodes []Node) [][]int {
	at := map[string]int{}
	var out [][]int
	for i, n := range nodes {
		key := setKey(n.Available)
		j, ok := at[key]
		if !ok {
			j = len(out)
			at[key] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// setKey is a feature list as a set: sorted, without repeats.
func setKey(fs []string) string {
	s := slices.Clone(fs)
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
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
	return setKey(a) == setKey(b)
}

// FeatureResult is what ApplyFeatures did.
type FeatureResult struct {
	// Calls is how many update RPCs were made; Records of them wrote
	// AvailableFeatures.
	Calls, Records int
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
	// Pace is how the calls were spaced: their count, the time spent in
	// them and between them.
	Pace Pacer
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

// probeJob is the job the pacer's reads ask for: the largest job id Slurm
// gives (MAX_JOB_ID), which a cluster seldom reaches; if one has it, the
// read is as good.
const probeJob = "67108863"

// maxFailedInARow is how many calls in a row may fail before ApplyFeatures
// stops: a bad node name fails one call, a controller that is gone fails
// them all.
const maxFailedInARow = 5

// maxErrors bounds the errors a result keeps: a reconcile of 10,000 calls
// against a controller that refuses them all must not carry 10,000
// messages into a log line.
const maxErrors = 20

// ApplyFeatures makes the plan's calls, one after another through one
// scontrol session (slurmctld takes node updates one at a time anyway),
// spaced by pace (nil: a Pacer with the defaults), then reads the changed
// nodes back (readBack) and checks them. It goes on after a failed call:
// the other groups are independent of it, except that a node whose record
// write failed is left out of the presence calls, whose active sets its
// available one may not hold.
func (r *Runner) ApplyFeatures(ctx context.Context, plan FeaturePlan, pace *Pacer) FeatureResult {
	var res FeatureResult
	if len(plan.Records)+len(plan.Presence) == 0 {
		return res
	}
	if pace == nil {
		pace = &Pacer{}
	}
	sess, err := r.StartSession(ctx)
	if err != nil {
		res.Errors = append(res.Errors, err)
	} else {
		defer sess.Close()
	}
	failed := map[string]bool{}
	inARow := 0
	call := func(u FeatureUpdate) error {
		if sess != nil && sess.Alive() && pace.WantProbe() {
			// What a user's squeue meets now: a job lookup takes the same
			// read locks. An unknown job is answered as quickly as a
			// known one; the answer itself does not matter.
			t0 := time.Now()
			sess.Run(ctx, "show", "job", probeJob)
			pace.Probed(time.Since(t0))
		}
		res.Calls++
		start := time.Now()
		var err error
		if sess != nil {
			err = sess.Run(ctx, u.Args()...)
		} else {
			_, err = r.Run(ctx, "scontrol", u.Args()...)
		}
		wait := pace.Pause(time.Since(start))
		if err != nil {
			inARow++
		} else {
			inARow = 0
		}
		if err != nil {
			if len(res.Errors) < maxErrors {
				res.Errors = append(res.Errors, err)
			} else if len(res.Errors) == maxErrors {
				res.Errors = append(res.Errors, errors.New("… and more failed calls"))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		return err
	}
	// A controller that refuses or ignores call after call is not there
	// (down, restarting, unreachable): the rest waits for the next sync
	// rather than costing a timeout each.
	gone := func() bool { return ctx.Err() != nil || inARow >= maxFailedInARow }
	for _, u := range plan.Records {
		if gone() {
			break
		}
		res.Records++
		if call(u) != nil {
			for _, n := range u.Nodes {
				failed[n] = true
			}
		}
	}
	for _, u := range plan.Presence {
		if gone() {
			break
		}
		if len(failed) > 0 {
			u.Nodes = slices.DeleteFunc(slices.Clone(u.Nodes), func(n string) bool { return failed[n] })
			if len(u.Nodes) == 0 {
				continue
			}
		}
		call(u)
	}
	if ctx.Err() != nil {
		res.Errors = append(res.Errors, ctx.Err())
	} else if inARow >= maxFailedInARow {
		res.Errors = append(res.Errors, fmt.Errorf("stopped after %d failed calls in a row, %d of %d made; the next sync makes the rest",
			inARow, res.Calls, len(plan.Records)+len(plan.Presence)))
	}
	res.Pace = *pace
	res.Nodes, res.ReadErr = r.readBack(ctx, plan)
	if res.ReadErr != nil {
		return res
	}
	byName := make(map[string]*Node, len(res.Nodes))
	for i := range res.Nodes {
		byName[res.Nodes[i].Name] = &res.Nodes[i]
	}
	unlisted := map[string]bool{}
	for _, n := range plan.From {
		if n.Unlisted {
			unlisted[n.Name] = true
		}
	}
	for name, w := range plan.expected() {
		n := byName[name]
		if n == nil && unlisted[name] {
			continue // not read back (readBack)
		}
		if n == nil || (w.record && !sameSet(n.Available, w.available)) || !sameSet(n.Active, w.active) {
			res.Wrong = append(res.Wrong, name)
		}
	}
	SortNodeNames(res.Wrong)
	return res
}

// readBack reads Slurm's listed nodes after the plan's calls, the way the
// plan's were read (ReadNodes): the available sets again only when a
// record was written, else as the plan had them. The unlisted nodes a
// record write covered are not read back: sinfo does not show them, and
// the whole listing that does (UnlistedNodes) is what the grouped reads
// are there to spare.
func (r *Runner) readBack(ctx context.Context, plan FeaturePlan) ([]Node, error) {
	list, err := r.ReadNodes(ctx, len(plan.Records) > 0 || plan.From == nil)
	if err != nil {
		return nil, err
	}
	if !list.Available {
		from := make(map[string][]string, len(plan.From))
		for _, n := range plan.From {
			from[n.Name] = n.Available
		}
		for i := range list.Nodes {
			set, ok := from[list.Nodes[i].Name]
			if !ok {
				// A node that came since the plan's read: its set is
				// not known, so read them all.
				if list, err = r.ReadNodes(ctx, true); err != nil {
					return nil, err
				}
				break
			}
			list.Nodes[i].Available = set
		}
	}
	return list.Nodes, nil
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
