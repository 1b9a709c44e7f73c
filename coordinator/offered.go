package coordinator

import (
	"cmp"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// maxNodeListing bounds what llmgw's AvailableFeatures may add to
// slurmctld's answer to a node listing (sinfo, scontrol show node, the
// reconciler's own read). Every node carries the whole superset, one
// feature per catalog model, and slurmctld sends every node's sets in one
// message, which may not pass MAX_MSG_SIZE, 1 GiB (src/common/pack.h;
// checked on receipt in slurm_protocol_socket.c, 22.05 to 26.05): past it
// sinfo fails for everyone. A quarter of it leaves the rest of each node's
// record, the active sets and growth their room. At 10,000 nodes that is
// 26 KB of owned features a node, 200 models of 64-character names (14,200
// bytes) with room to spare (docs/slurm/behaviour.md §11).
const maxNodeListing = 256 << 20

// offeredFeatures is the owned part of the AvailableFeatures superset: the
// feature of every catalog model, as long as the superset on every node of
// Slurm's fits maxNodeListing. Past it, the least-held models (by desired,
// then by name, so the choice is the same every run) are withheld: they get
// no feature anywhere and their jobs no preference, which loses a hint,
// never a job. withheld is sorted.
func offeredFeatures(models []string, nodes []slurm.Node, desired map[string][]string) (offered, withheld []string) {
	site := 0
	for _, n := range nodes {
		l := 0
		for _, f := range n.Available {
			if !strings.HasPrefix(f, placement.FeaturePrefix) {
				l += len(f) + 1
			}
		}
		site = max(site, l)
	}
	budget := maxNodeListing/max(len(nodes), 1) - site
	holders := map[string]int{}
	for _, fs := range desired {
		for _, f := range fs {
			holders[f]++
		}
	}
	fs := make([]string, len(models))
	for i, m := range models {
		fs[i] = placement.FeaturePrefix + m
	}
	slices.SortFunc(fs, func(a, b string) int { return cmp.Or(cmp.Compare(holders[b], holders[a]), cmp.Compare(a, b)) })
	used := 0
	for _, f := range fs {
		if used+len(f)+1 > budget {
			withheld = append(withheld, strings.TrimPrefix(f, placement.FeaturePrefix))
			continue
		}
		used += len(f) + 1
		offered = append(offered, f)
	}
	slices.Sort(offered)
	slices.Sort(withheld)
	return offered, withheld
}

// withhold drops the withheld models' features from desired.
func withhold(desired map[string][]string, withheld []string) map[string][]string {
	if len(withheld) == 0 {
		return desired
	}
	drop := make(map[string]bool, len(withheld))
	for _, m := range withheld {
		drop[placement.FeaturePrefix+m] = true
	}
	out := make(map[string][]string, len(desired))
	for n, fs := range desired {
		out[n] = slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return drop[f] })
	}
	return out
}
