package table

import (
	"fmt"
	"io"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// WritePlacement prints a placement ranking: what was asked, the fabrics in
// the order a multi-node job tries them, every node best first with its
// checks and the reason for its place, then the nodes to use.
func WritePlacement(w io.Writer, p *api.Placement) error {
	p = escaped(p)
	m := p.Model
	fmt.Fprintf(w, "MODEL %s  source %s  nodes wanted %d", m.Name, m.Source, p.Count)
	if p.FetchBytes > 0 {
		fmt.Fprintf(w, "  a fetch is %s", catalog.FormatBytes(p.FetchBytes))
	}
	if m.GPUMemory > 0 {
		fmt.Fprintf(w, "  gpu memory %s", catalog.FormatBytes(m.GPUMemory))
	}
	fmt.Fprintln(w)
	if p.Count > 1 && len(p.Fabrics) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "FABRIC\tHOLDERS\tLOCAL\tUSABLE\tENOUGH\tWHY")
		for _, f := range p.Fabrics {
			enough := "no"
			if f.Enough {
				enough = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", fabricName(f.Fabric), f.Holders, f.LocalHolders, f.Usable, enough, f.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "RANK\tNODE\tFABRIC\tTIER\tHOLDS\tMEMORY\tDISK\tREASON")
	if len(p.Nodes) == 0 {
		fmt.Fprintln(tw, "-\t-\t-\t-\t-\t-\t-\t(no candidate nodes)")
	}
	for _, n := range p.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Rank, n.Node, fabricName(n.Fabric), n.Tier, n.Holds,
			checkText(n.Memory, ""), checkText(n.Disk, " free"), n.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(p.Choice) > 0 {
		fmt.Fprintf(w, "USE: %s\n", strings.Join(p.Choice, ","))
	}
	if p.Note != "" {
		fmt.Fprintf(w, "NOTE: %s\n", p.Note)
	}
	// The skipped checks' reasons are the same on most nodes; say each once.
	seen := map[string]bool{}
	for _, n := range p.Nodes {
		for _, c := range []api.PlacementCheck{n.Memory, n.Disk} {
			if c.Result == api.CheckSkip && !seen[c.Reason] && !strings.Contains(n.Reason, c.Reason) {
				seen[c.Reason] = true
				fmt.Fprintf(w, "SKIPPED: %s\n", c.Reason)
			}
		}
	}
	return nil
}

// checkText is a check in a cell: "skip", "ok 80 GB", "FAIL 16 GB < 20 GB".
func checkText(c api.PlacementCheck, unit string) string {
	switch c.Result {
	case api.CheckPass:
		return "ok " + catalog.FormatBytes(c.HaveBytes) + unit
	case api.CheckFail:
		return "FAIL " + catalog.FormatBytes(c.HaveBytes) + unit + " < " + catalog.FormatBytes(c.NeedBytes)
	}
	return c.Result
}

func fabricName(f string) string {
	if f == "" {
		return "(unknown)"
	}
	return f
}
