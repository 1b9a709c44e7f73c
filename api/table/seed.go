package table

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
)

// WriteSeed prints a seed request as `llmgw seed` shows it: the request,
// then each node with its part (held already, asked, done, expired), when
// the ask reached it, when it reported holding the model, and its fetch.
func WriteSeed(w io.Writer, st api.SeedStatus) error {
	st = escaped(st)
	copies := fmt.Sprintf("%d copies", st.Copies)
	if st.Copies == 1 {
		copies = "1 copy"
	}
	fmt.Fprintf(w, "seed %s: %s in %s, %s (asking until %s)\n", st.ID, st.Model, st.Fabric,
		copies, st.Deadline.UTC().Format(time.RFC3339))
	if st.Note != "" {
		fmt.Fprintf(w, "NOTE: %s\n", st.Note)
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tSTATE\tASKED\tHOLDS SINCE\tFETCH")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.State, since(st.Created, n.Handed), since(st.Created, n.Done), seedFetch(n))
	}
	return tw.Flush()
}

// SeedProgress is one node's progress in a line, for `llmgw seed` to print
// as it waits: "n3: fetching 41% 120 MB/s ETA 1m12s".
func SeedProgress(n api.SeedNode) string {
	n = escaped(n)
	switch n.State {
	case api.SeedHeld:
		return n.Node + ": held it already"
	case api.SeedDone:
		return n.Node + ": holds it"
	case api.SeedExpired:
		return n.Node + ": did not report holding it before the request's deadline"
	}
	switch {
	case n.Fetch != nil:
		return n.Node + ": fetching " + strings.TrimPrefix(fetchText(*n.Fetch), n.Node+" ")
	case n.Handed.IsZero():
		return n.Node + ": not asked yet (the ask rides on the answer to its next report)"
	}
	return n.Node + ": asked, no fetch reported yet"
}

func seedFetch(n api.SeedNode) string {
	if n.Fetch == nil {
		return "-"
	}
	return strings.TrimPrefix(fetchText(*n.Fetch), n.Node+" ")
}

// since is t as an offset from the request's creation ("+12s"), "-" when
// zero.
func since(created, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + seconds(max(t.Sub(created).Seconds(), 0))
}
