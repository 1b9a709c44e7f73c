package demo

import (
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// ExplainStatus says in a sentence what each row of `llmgw status` shows:
// one per model and fabric, then one per stale or never-looked fabric.
func ExplainStatus(st *api.Status) []string {
	var out []string
	for _, m := range st.Models {
		for _, p := range m.Fabrics {
			out = append(out, explainPresence(m.Model, p))
		}
	}
	for _, f := range st.Fabrics {
		if f.Stale != "" {
			out = append(out, fmt.Sprintf("%s: %s stale (no report for over %s), so nothing it last said counts: it holds nothing and fetches nothing as far as placement knows.",
				f.Fabric, isAre(f.Stale), seconds(st.StaleAfter)))
		}
		if f.NeverLooked != "" {
			out = append(out, fmt.Sprintf("%s: %s no weight directories configured; such a node ranks like one that looked and found nothing.", f.Fabric, hasHave(f.NeverLooked)))
		}
	}
	return out
}

func explainPresence(m api.Model, p api.FabricPresence) string {
	head := m.Name + " in " + p.Fabric + ": "
	var s string
	switch p.Serve {
	case api.HoldShared:
		s = fmt.Sprintf("on a shared filer seen by %s (%s); one copy on a network filesystem serves the whole fabric, the same answer twenty local copies would give.",
			count(p.SharedNodes, "node"), p.Holders)
	case api.HoldLocal:
		if p.LocalNodes == 1 {
			s = fmt.Sprintf("a local copy on %s (its own disk or its fetch cache); a job placed there starts at once, ", p.Holders)
		} else {
			s = fmt.Sprintf("local copies on %d nodes, %s (each on its own disk or fetch cache); a job placed there starts at once, ", p.LocalNodes, p.Holders)
		}
		if catalog.KindOf(m.Source) == catalog.KindRemote {
			s += "on another node of " + p.Fabric + " it would fetch it first."
		} else {
			s += "on another node of " + p.Fabric + " it would not find it: a path source is never fetched."
		}
	default:
		switch {
		case !p.Fetchable && catalog.KindOf(m.Source) == catalog.KindPath:
			s = "held nowhere, and a path source is checked, never fetched: a job here would not find it."
		case !p.Fetchable:
			s = "held nowhere; the engine resolves the model id itself."
		case p.FetchBytes > 0:
			s = fmt.Sprintf("held nowhere yet: a job placed in %s would first fetch %s from the origin.", p.Fabric, catalog.FormatBytes(p.FetchBytes))
		default:
			s = fmt.Sprintf("held nowhere yet: a job placed in %s would first fetch it (size unknown).", p.Fabric)
		}
	}
	for _, f := range p.Fetching {
		s += " " + explainFetch(f)
	}
	return head + s
}

func explainFetch(f api.FetchStatus) string {
	if f.Stalled {
		return fmt.Sprintf("%s has been fetching it but no byte arrived for %s: stalled, not slow.", f.Node, seconds(f.SinceProgress))
	}
	s := fmt.Sprintf("%s is fetching it now", f.Node)
	if f.Percent >= 0 {
		s += fmt.Sprintf(" (%.0f%% at %s/s)", f.Percent, catalog.FormatBytes(int64(f.Rate)))
	}
	return s + ": a job waiting for it there would show state R with Reason Prolog, not look stuck."
}

// ExplainModelNodes says what each node row of `llmgw status MODEL` shows.
func ExplainModelNodes(st *api.ModelNodes) []string {
	var out []string
	for _, n := range st.Nodes {
		s := n.Node + ": "
		switch {
		case n.State == api.NodeStale:
			s += fmt.Sprintf("stale, last heard %s ago; what it said then (%s) does not count.", seconds(n.Age), n.Holds)
		case n.Holds == api.HoldShared:
			s += "sees it on the shared filer at " + n.Path + "."
		case n.Holds == api.HoldLocal && catalog.IsCacheName(lastElem(n.Path)):
			s += "holds a copy in its fetch cache: fetched by its agent, kept for the next job."
		case n.Holds == api.HoldLocal:
			s += "holds a copy on its own disk at " + n.Path + "."
		case n.Fetch != nil:
			s += "does not hold it yet; " + explainFetch(*n.Fetch)
		case n.CacheTotal > 0:
			s += fmt.Sprintf("does not hold it; its cache has %s free, which is what placement's disk check reads.", catalog.FormatBytes(n.CacheFree))
		default:
			s += "does not hold it."
		}
		out = append(out, s)
	}
	return out
}

// ExplainPlacement says what a ranking means for a job.
func ExplainPlacement(p *api.Placement) []string {
	var out []string
	if p.Count > 1 {
		for _, f := range p.Fabrics {
			if f.Enough {
				out = append(out, fmt.Sprintf("Fabric %s can take all %d nodes: %s.", f.Fabric, p.Count, strings.TrimSuffix(f.Reason, ".")))
				break
			}
		}
	}
	if len(p.Nodes) > 0 {
		best := p.Nodes[0]
		out = append(out, fmt.Sprintf("%s ranks first (%s): %s.", best.Node, best.Tier, strings.TrimSuffix(best.Reason, ".")))
	}
	if len(p.Nodes) > 1 {
		last := p.Nodes[len(p.Nodes)-1]
		out = append(out, fmt.Sprintf("%s ranks last (%s): %s.", last.Node, last.Tier, strings.TrimSuffix(last.Reason, ".")))
	}
	if len(p.Choice) > 0 {
		out = append(out, fmt.Sprintf("For %s a job wanting %s should use %s; llmgw sbatch turns that into a --prefer, never a filter, so a busy holder delays nothing.",
			p.Model.Name, count(p.Count, "node"), strings.Join(p.Choice, ",")))
	}
	if p.Note != "" {
		out = append(out, "Note: "+p.Note)
	}
	return out
}

func lastElem(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// isAre and hasHave agree a verb with a hostlist of one or more nodes.
func isAre(hostlist string) string {
	if strings.ContainsAny(hostlist, ",[") {
		return hostlist + " are"
	}
	return hostlist + " is"
}

func hasHave(hostlist string) string {
	if strings.ContainsAny(hostlist, ",[") {
		return hostlist + " have"
	}
	return hostlist + " has"
}

func seconds(s float64) string {
	return fmt.Sprintf("%.0fs", s)
}
