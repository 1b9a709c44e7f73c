package coordinator

import (
	"cmp"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/slurm"
)

// boundFeatureSets keeps the number of distinct feature sets the
// reconciler leaves on Slurm's nodes at or under max, by leaving out the
// features of the least-held models, and returns the desired features so
// trimmed with the models left out (sorted). max <= 0 bounds nothing.
//
// Every distinct feature set is a node config record of its own in
// slurmctld (22.05 never merges them again), which the scheduler walks for
// every job; when every node holds its own mix of models the records
// approach the nodes. The most-held models keep their features, since they
// are where a preference steers the most jobs; a model left out gets no
// preference (its jobs run anywhere and fetch), which loses a hint, never a
// job. Models are taken most-held first (then by name, so the choice is the
// same every run), each kept only when the sets stay within max with it.
//
// The sets counted are the nodes' whole resulting ones: the features llmgw
// does not own (the site's, such as the fabric) split the records as well.
// Nodes Slurm does not list get no feature anyway and are left as they are.
func boundFeatureSets(nodes []slurm.Node, prefix string, desired map[string][]string, max int) (map[string][]string, []string) {
	if max <= 0 {
		return desired, nil
	}
	// key[i] is node i's set so far: its features llmgw does not own, then
	// the kept models it holds, in the order they were kept, which is the
	// same for every node, so equal sets have equal keys.
	key := make([]string, len(nodes))
	holders := map[string][]int{}
	for i, n := range nodes {
		key[i] = strings.Join(notOwned(n.Available, prefix), ",") + "\x00" + strings.Join(notOwned(n.Active, prefix), ",") + "\x00"
		for _, f := range desired[n.Name] {
			if m, ok := strings.CutPrefix(f, prefix); ok {
				holders[m] = append(holders[m], i)
			}
		}
	}
	models := make([]string, 0, len(holders))
	for m, hs := range holders {
		holders[m] = slices.Compact(hs)
		models = append(models, m)
	}
	slices.SortFunc(models, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(holders[b]), len(holders[a])), cmp.Compare(a, b))
	})
	var left []string
	next := make([]string, len(nodes))
	for _, m := range models {
		copy(next, key)
		for _, i := range holders[m] {
			next[i] += m + ","
		}
		if distinct(next) > max {
			left = append(left, m)
			continue
		}
		key, next = next, key
	}
	if len(left) == 0 {
		return desired, nil
	}
	drop := make(map[string]bool, len(left))
	for _, m := range left {
		drop[prefix+m] = true
	}
	out := make(map[string][]string, len(desired))
	for n, fs := range desired {
		out[n] = slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return drop[f] })
	}
	slices.Sort(left)
	return out, left
}

// distinct counts the distinct strings in keys.
func distinct(keys []string) int {
	seen := make(map[string]struct{}, 64)
	for _, k := range keys {
		seen[k] = struct{}{}
	}
	return len(seen)
}

// notOwned is the features in fs that llmgw does not own, sorted.
func notOwned(fs []string, prefix string) []string {
	var out []string
	for _, f := range fs {
		if !strings.HasPrefix(f, prefix) {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}
