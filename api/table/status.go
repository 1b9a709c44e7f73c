// Package table renders the coordinator's answers as the tables llmgw's
// commands print: sinfo's style, one row per model and fabric, node names as
// hostlists. It formats api types only, so a command renders exactly what
// the coordinator answered (--json prints that answer itself), and the
// command line links no server code and no database driver for it.
package table

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// WriteStatus prints the cluster status: per model and fabric whether the
// fabric can serve it and how, fetches in progress, then the stale and
// never-looked nodes.
func WriteStatus(w io.Writer, st *api.Status) error {
	st = escaped(st)
	tw := newTable(w)
	fmt.Fprintln(tw, "MODEL\tFABRIC\tSERVE\tHOLDERS\tNODES\tFETCHING")
	switch {
	case len(st.Models) == 0:
		fmt.Fprintln(tw, "(the catalog is empty: add a model with 'llmgw models add NAME SOURCE')")
	case len(st.Fabrics) == 0:
		for _, m := range st.Models {
			fmt.Fprintf(tw, "%s\t-\t-\t(no node has reported yet)\t-\t-\n", m.Model.Name)
		}
	}
	for _, m := range st.Models {
		for _, p := range m.Fabrics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Model.Name, p.Fabric, p.Serve,
				holdersText(m.Model, p), dash(p.Holders), fetchingText(p.Fetching))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeFeatureStatus(w, st); err != nil {
		return err
	}
	if err := writeSwarms(w, st); err != nil {
		return err
	}
	if err := writePrefetch(w, st); err != nil {
		return err
	}
	for _, g := range st.GCHeld {
		since := ""
		if !g.Since.IsZero() {
			since = " since " + g.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "\nGC HELD on %s%s: %s\n  nodes: %s\n  'llmgw gc --trust' adopts the current catalog on every node (gc_max_share still holds)\n",
			plural(g.Count, "node"), since, g.Why, g.Nodes)
	}
	if len(st.Fabrics) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "FABRIC\tNODES\tOK\tSTALE\tNEVER-LOOKED")
	for _, f := range st.Fabrics {
		c := f.Counts
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", f.Fabric, c.Total, c.OK, c.Stale, c.NeverLooked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Nodes.Stale > 0 {
		fmt.Fprintf(w, "\nSTALE: no report for over %s; what they last said does not count\n", seconds(st.StaleAfter))
		if err := hostlists(w, st.Fabrics, func(f api.FabricNodes) string { return f.Stale }); err != nil {
			return err
		}
	}
	if st.Nodes.NeverLooked > 0 {
		fmt.Fprintln(w, "\nNEVER LOOKED: the agent has no weight directories configured and sees only its fetch cache; these rank like nodes that hold nothing else")
		if err := hostlists(w, st.Fabrics, func(f api.FabricNodes) string { return f.NeverLooked }); err != nil {
			return err
		}
	}
	return nil
}

func hostlists(w io.Writer, fabrics []api.FabricNodes, get func(api.FabricNodes) string) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "FABRIC\tNODES")
	for _, f := range fabrics {
		if l := get(f); l != "" {
			fmt.Fprintf(tw, "%s\t%s\n", f.Fabric, l)
		}
	}
	return tw.Flush()
}

// holdersText says in words how a fabric holds a model, or what a job
// placed there would have to do without it.
func holdersText(m api.Model, p api.FabricPresence) string {
	switch p.Serve {
	case api.HoldShared:
		s := "filer (" + plural(p.SharedNodes, "node") + ")"
		if p.LocalNodes > 0 {
			s += " + local on " + plural(p.LocalNodes, "node")
		}
		return s
	case api.HoldLocal:
		return "local on " + plural(p.LocalNodes, "node")
	}
	switch {
	case !p.Fetchable && strings.HasPrefix(m.Source, "/"):
		return "nowhere (a path source is never fetched)"
	case !p.Fetchable:
		return "nowhere (the engine resolves the id)"
	case p.FetchBytes > 0:
		return "a job fetches " + catalog.FormatBytes(p.FetchBytes)
	}
	return "a job fetches it (size unknown)"
}

func fetchingText(fs []api.FetchStatus) string {
	if len(fs) == 0 {
		return "-"
	}
	const show = 2
	var parts []string
	for i, f := range fs {
		if i == show {
			parts = append(parts, fmt.Sprintf("+%d more", len(fs)-show))
			break
		}
		parts = append(parts, fetchText(f))
	}
	return strings.Join(parts, ", ")
}

// fetchText is one fetch: "n3 41% 120 MB/s ETA 1m12s", or "n3 41% stalled
// 5m0s" when no byte has arrived for longer than the stall threshold.
func fetchText(f api.FetchStatus) string {
	s := f.Node
	if f.Percent >= 0 {
		s += fmt.Sprintf(" %.0f%%", f.Percent)
	} else {
		s += " " + catalog.FormatBytes(f.Done)
	}
	if f.Stalled {
		return s + " stalled " + seconds(f.SinceProgress)
	}
	s += " " + catalog.FormatBytes(int64(f.Rate)) + "/s"
	if f.ETA >= 0 {
		s += " ETA " + seconds(f.ETA)
	}
	return s
}

// WriteModelNodes prints one model: its per-fabric rows, then every node.
func WriteModelNodes(w io.Writer, st *api.ModelNodes) error {
	st = escaped(st)
	m := st.Model
	fmt.Fprintf(w, "MODEL %s  source %s", m.Name, m.Source)
	if m.Size > 0 {
		fmt.Fprintf(w, "  size %s", catalog.FormatBytes(m.Size))
	}
	if m.GPUMemory > 0 {
		fmt.Fprintf(w, "  gpu memory %s", catalog.FormatBytes(m.GPUMemory))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "FABRIC\tSERVE\tHOLDERS\tNODES\tFETCHING")
	if len(st.Fabrics) == 0 {
		fmt.Fprintln(tw, "-\t-\t(no node has reported yet)\t-\t-")
	}
	for _, p := range st.Fabrics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Fabric, p.Serve, holdersText(m, p), dash(p.Holders), fetchingText(p.Fetching))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Nodes) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "NODE\tFABRIC\tSTATE\tHOLDS\tPATH\tCACHE FREE\tFETCH\tLAST REPORT")
	for _, n := range st.Nodes {
		path := dash(n.Path)
		if n.Holds == api.HoldNone && n.Incomplete != "" {
			path = "incomplete " + n.Incomplete
		}
		fetch := "-"
		if n.Fetch != nil {
			fetch = strings.TrimPrefix(fetchText(*n.Fetch), n.Node+" ")
		}
		free := "-"
		if n.CacheTotal > 0 {
			free = catalog.FormatBytes(n.CacheFree)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n", n.Node, n.Fabric, n.State, n.Holds, path, free, fetch, seconds(n.Age))
	}
	return tw.Flush()
}

// WriteModels prints the catalog.
func WriteModels(w io.Writer, models []api.Model) error {
	models = escaped(models)
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tSOURCE\tSIZE\tGPU MEMORY\tSHA256\tDIGEST\tUPDATED")
	for _, m := range models {
		sum, from := "-", digestFrom(m)
		if want := m.WantSHA256(); want != "" {
			sum = want[:min(12, len(want))] + "…"
		}
		size, gpu := "-", "-"
		if m.Size > 0 {
			size = catalog.FormatBytes(m.Size)
		}
		if m.GPUMemory > 0 {
			gpu = catalog.FormatBytes(m.GPUMemory)
		}
		updated := "-"
		if !m.Updated.IsZero() {
			updated = m.Updated.UTC().Format(time.RFC3339)
		}
		src := m.Source
		if m.IsHub() {
			// The repository, the revision asked for, and the commit it
			// stands for, shortened as git shortens one.
			src = fmt.Sprintf("hf:%s@%s (%s, %s)", m.Hub.Repo, m.Hub.Commit[:min(12, len(m.Hub.Commit))], m.Hub.Revision, plural(len(m.Hub.Files), "file"))
		} else if m.IsSet() {
			more := "files"
			if len(m.Files) == 2 {
				more = "file"
			}
			src = fmt.Sprintf("%s (+%d %s)", m.Source, len(m.Files)-1, more)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, src, size, gpu, sum, from, updated)
	}
	return tw.Flush()
}

// digestFrom says where the digest fetches verify against comes from:
// declared by an admin, pinned at the first verified fetch, or not yet
// known (a fetched source before its first fetch). A path or a model id
// is never fetched, so has none.
func digestFrom(m api.Model) string {
	if m.IsHub() {
		// The commit pins the model, the Hub's digests each file.
		return "commit"
	}
	if m.IsSet() {
		// Each file of a model of several is declared or pinned on its own.
		var n [3]int
		for _, f := range m.Files {
			switch {
			case f.SHA256 != "":
				n[0]++
			case f.Pinned != "":
				n[1]++
			default:
				n[2]++
			}
		}
		var parts []string
		for i, w := range []string{"declared", "pinned", "unpinned"} {
			if n[i] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n[i], w))
			}
		}
		return strings.Join(parts, ", ")
	}
	switch {
	case m.SHA256 != "":
		return "declared"
	case m.Pinned != "" && m.PinnedETag != "":
		// How the origin named the pinned version: what an admin asks
		// the origin about before a repin.
		o := m.PinnedETag
		if r := []rune(o); len(r) > 48 {
			o = string(r[:47]) + "…"
		}
		return "pinned (" + o + ")"
	case m.Pinned != "":
		return "pinned"
	case catalog.KindOf(m.Source) == catalog.KindRemote:
		return "unpinned"
	}
	return "-"
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeFeatureStatus says, when the reconciler is on, whether Slurm's node
// features are in step, and if not, why and when it tries again.
func writeFeatureStatus(w io.Writer, st *api.Status) error {
	f := st.Features
	if f == nil {
		return nil
	}
	var err error
	switch {
	case f.Last == nil:
		_, err = fmt.Fprintln(w, "\nSLURM FEATURES: not synced yet")
	case f.Last.Error != "":
		when := "never worked"
		if !f.LastOK.IsZero() {
			when = "last worked " + seconds(st.Generated.Sub(f.LastOK).Seconds()) + " ago"
		}
		_, err = fmt.Fprintf(w, "\nSLURM FEATURES: FAILING (%s; retry in %s): %s\n", when,
			seconds(max(f.Retry.Sub(st.Generated).Seconds(), 0)), f.Last.Error)
	default:
		_, err = fmt.Fprintf(w, "\nSLURM FEATURES: in step %s ago: %d nodes, %d changed in %s; published to %s\n",
			seconds(st.Generated.Sub(f.Last.Time).Seconds()), f.Last.Nodes, f.Last.Drifted,
			plural(f.Last.Calls, "call"), f.File)
	}
	return err
}
