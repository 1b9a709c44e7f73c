package slurm

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// WriteFeatureClasses writes the class lines of the feature file that
// job_submit.lua reads (coordinator.FeatureFile writes the rest): nodes
// folded into classes, those alike but for their features with prefix
// (the same partitions and the same other features), and per feature with
// prefix the number of its holders in each class:
//
//	#c <nodes> <partitions, comma-separated, or -> <other features, sorted, comma-separated, or ->
//	#h <feature> <class>:<holders>,<class>:<holders>,...
//
// classes numbered from 1 in the order of their first node, #h lines in
// feature order. A job's count (Compose's, and its Lua twin's) needs no
// more than that unless it excludes nodes or its expression names another
// such feature, so when the nodes change the module reads these few lines
// instead of one line per node (slurm/lua/llmgw_compose.lua, new_index):
// at 10,000 nodes the first job after a change cost 47 ms of slurmctld's
// time under its locks when it parsed every node. Features are taken as
// given: the caller has left out what the file may not hold (a space or a
// comma), and a node's features are counted once each.
func WriteFeatureClasses(w io.Writer, nodes []FeatureNode, prefix string) error {
	type class struct {
		count       int
		parts, site string
	}
	var classes []class
	at := map[string]int{}
	held := map[string]map[int]int{}
	for _, n := range nodes {
		var site, ours []string
		for _, f := range n.Features {
			if f == "" {
				continue
			}
			if strings.HasPrefix(f, prefix) {
				ours = append(ours, f)
			} else {
				site = append(site, f)
			}
		}
		slices.Sort(site)
		site = slices.Compact(site)
		parts := dashed(n.Partitions)
		key := parts + " " + dashed(site)
		c, ok := at[key]
		if !ok {
			c = len(classes) + 1
			at[key] = c
			classes = append(classes, class{parts: parts, site: dashed(site)})
		}
		classes[c-1].count++
		slices.Sort(ours)
		for _, f := range slices.Compact(ours) {
			if held[f] == nil {
				held[f] = map[int]int{}
			}
			held[f][c]++
		}
	}
	var b strings.Builder
	for _, c := range classes {
		fmt.Fprintf(&b, "#c %d %s %s\n", c.count, c.parts, c.site)
	}
	features := make([]string, 0, len(held))
	for f := range held {
		features = append(features, f)
	}
	slices.Sort(features)
	for _, f := range features {
		b.WriteString("#h " + f + " ")
		cs := make([]int, 0, len(held[f]))
		for c := range held[f] {
			cs = append(cs, c)
		}
		slices.Sort(cs)
		for i, c := range cs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(c) + ":" + strconv.Itoa(held[f][c]))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dashed(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}
