package table

import (
	"fmt"
	"io"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// WriteGC prints a gc request's outcome as `llmgw gc` shows it: per node
// what it was asked to remove and what it did, then each file with the
// node's reason, then the nodes that did not answer. "Asked to remove" is
// the coordinator's list; the node's own judgement is what happened.
func WriteGC(w io.Writer, st api.GCStatus) error {
	st = escaped(st)
	mode := "collect: nodes remove what they agree is garbage"
	switch {
	case !st.Collect:
		mode = "list only: nothing is removed without --collect"
	case st.Force:
		mode = "collect, forced: nodes remove what they agree is garbage, even against a catalog they do not trust and beyond gc_max_share"
	}
	if st.Trust {
		mode += "; the current catalog is adopted as the one every node trusts"
	}
	fmt.Fprintf(w, "gc %s (%s)\n\n", st.ID, mode)
	if len(st.Nodes) == 0 {
		fmt.Fprintln(w, "(no node has reported to this coordinator, so none was asked)")
		return nil
	}
	done, freed := "REMOVED", "FREED"
	if !st.Collect {
		done, freed = "WOULD REMOVE", "WOULD FREE"
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "NODE\tASKED TO REMOVE\t%s\tKEPT\tREFUSED\t%s\tNOTE\n", done, freed)
	var silent []string
	for _, n := range st.Nodes {
		a := n.Answer
		if a == nil {
			silent = append(silent, n.Node)
			continue
		}
		count := map[string]int{}
		bytes := a.Freed
		for _, f := range a.Files {
			count[f.Action]++
			if !st.Collect && f.Action == "listed" {
				bytes += f.Size
			}
		}
		removed := count["removed"]
		if !st.Collect {
			removed = count["listed"]
		}
		note := a.Held
		if count["failed"] > 0 {
			note = strings.TrimPrefix(note+"; ", "; ") + plural(count["failed"], "removal") + " failed"
		}
		if count["evicted"] > 0 {
			note = strings.TrimPrefix(note+"; ", "; ") + plural(count["evicted"], "file") + " evicted under pressure lately"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", n.Node, len(n.Asked), removed, count["kept"],
			count["refused"], catalog.FormatBytes(bytes), dash(note))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var files int
	for _, n := range st.Nodes {
		if n.Answer != nil {
			files += len(n.Answer.Files)
		}
	}
	if files > 0 {
		fmt.Fprintln(w)
		tw = newTable(w)
		fmt.Fprintln(tw, "NODE\tACTION\tFILE\tSIZE\tWHY")
		for _, n := range st.Nodes {
			if n.Answer == nil {
				continue
			}
			for _, f := range n.Answer.Files {
				size := "-"
				if f.Size > 0 {
					size = catalog.FormatBytes(f.Size)
				}
				action := f.Action
				if action == "listed" {
					action = "would remove"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, action, f.Name, size, f.Reason)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(silent) > 0 {
		fmt.Fprintf(w, "\nDID NOT ANSWER (%d): %s\n", len(silent), strings.Join(silent, " "))
		fmt.Fprintln(w, "A node not handed the request made no report before the deadline (down, or its agent stopped); a node handed it but silent may have run it and lost its answer. 'llmgw status' shows stale nodes.")
		tw = newTable(w)
		fmt.Fprintln(tw, "NODE\tHANDED")
		for _, n := range st.Nodes {
			if n.Answer == nil {
				h := "no (no report before the deadline)"
				if !n.Handed.IsZero() {
					h = n.Handed.UTC().Format("15:04:05") + ", asked to remove " + plural(len(n.Asked), "file")
				}
				fmt.Fprintf(tw, "%s\t%s\n", n.Node, h)
			}
		}
		return tw.Flush()
	}
	return nil
}
