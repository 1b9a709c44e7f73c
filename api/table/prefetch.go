package table

import (
	"fmt"
	"io"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// writePrefetch shows the prefetcher (issue 28), when it runs: how it reads
// Slurm, what came of the starts, and each pending job it watches with its
// planned nodes, bytes and state.
func writePrefetch(w io.Writer, st *api.Status) error {
	p := st.Prefetch
	if p == nil {
		return nil
	}
	read := "not yet"
	if !p.LastRead.IsZero() {
		read = seconds(st.Generated.Sub(p.LastRead).Seconds()) + " ago"
	}
	fmt.Fprintf(w, "\nPREFETCH: backfill's plans read every %s, last %s; %s to slurmctld in the last minute; horizon %s\n",
		seconds(p.Interval), read, plural(p.CallsPerMinute, "call"), seconds(p.Horizon))
	if p.Error != "" {
		fmt.Fprintf(w, "  not reading: %s\n", p.Error)
	}
	fmt.Fprintf(w, "  starts: %d warm, %d cold; prefetched %s, used by jobs %s\n", p.WarmStarts, p.ColdStarts,
		catalog.FormatBytes(p.Bytes.Fetched), catalog.FormatBytes(p.Bytes.Used))
	if len(p.Jobs) == 0 {
		_, err := fmt.Fprintln(w, "  (no pending job names a model)")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "JOB\tMODEL\tNODES\tSTART\tSTATE\tBYTES\tNODE STATES")
	for _, j := range p.Jobs {
		start := "-"
		if !j.Start.IsZero() {
			if d := j.Start.Sub(st.Generated).Seconds(); d > 0 {
				start = "in " + seconds(d)
			} else {
				start = "due"
			}
		}
		bytes := "-"
		if j.Total > 0 {
			bytes = catalog.FormatBytes(j.Done) + "/" + catalog.FormatBytes(j.Total)
		}
		states := strings.Join(j.NodeStates, " ")
		if j.Why != "" {
			states = strings.TrimSpace(states + " (" + j.Why + ")")
		}
		model := j.Model
		if j.Warm {
			model += " (warm wanted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Job, model, dash(j.Nodes), start, j.State, bytes, dash(states))
	}
	return tw.Flush()
}
