package table

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// writeSwarms prints, when there are any, the swarms (one row per fabric
// and file: who reads the origin for the fabric, how many fetch or serve
// it, how many bytes came from the origin and how many over the fabric, and
// the peers members could not use), then the seed requests still asking.
// st is already escaped.
func writeSwarms(w io.Writer, st *api.Status) error {
	if len(st.Swarms) > 0 {
		fmt.Fprintln(w, "\nSWARMS: nodes of a fabric fetching one file, one of them (the lease holder) from the origin, the rest from each other")
		tw := newTable(w)
		fmt.Fprintln(tw, "FABRIC\tMODEL\tLEASE HOLDER\tMEMBERS\tCOMPLETE\tFROM ORIGIN\tFROM PEERS\tBAD/UNREACHABLE")
		for _, s := range st.Swarms {
			what := s.Model
			if what == "" {
				what = s.Source
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Fabric, what, dash(s.Holder), s.Members, s.Complete,
				catalog.FormatBytes(s.FromOrigin), catalog.FormatBytes(s.FromPeers), swarmTrouble(s))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.SwarmBytes) > 0 {
		fmt.Fprintln(w, "\nFROM THE ORIGIN AND FROM PEERS: what swarm members received since the coordinator started")
		tw := newTable(w)
		fmt.Fprintln(tw, "FABRIC\tFROM ORIGIN\tFROM PEERS\tFROM PEERS %")
		for _, f := range st.SwarmBytes {
			share := "-"
			if all := f.FromOrigin + f.FromPeers; all > 0 {
				share = fmt.Sprintf("%.0f%%", 100*float64(f.FromPeers)/float64(all))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Fabric, catalog.FormatBytes(f.FromOrigin), catalog.FormatBytes(f.FromPeers), share)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.Seeds) > 0 {
		fmt.Fprintln(w, "\nSEEDING: nodes asked (llmgw seed) to fetch a model, at each report until they hold it")
		tw := newTable(w)
		fmt.Fprintln(tw, "MODEL\tFABRIC\tASKED\tNOT YET HANDED\tUNTIL\tREQUEST")
		for _, s := range st.Seeds {
			var asked, waiting []string
			for _, n := range s.Nodes {
				asked = append(asked, n.Node)
				if n.Handed.IsZero() {
					waiting = append(waiting, n.Node)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Model, s.Fabric, strings.Join(asked, ","), dash(strings.Join(waiting, ",")),
				s.Deadline.UTC().Format(time.RFC3339), s.ID)
		}
		return tw.Flush()
	}
	return nil
}

// swarmTrouble says which peers members could not use: "bad n3 (by n4,n5;
// dropped)" for a peer that sent bad chunks, "unreachable n6"; and the
// members whose chunk digests lost to others' ("digests refuted n7"), the
// chunks two readers disagree on ("2 chunks frozen"), and the members that
// lost the origin lease for what they did ("lease revoked n8").
func swarmTrouble(s api.SwarmStatus) string {
	var parts []string
	for _, b := range s.Bad {
		p := "bad " + b.Peer + " (by " + strings.Join(b.By, ",")
		if b.Dropped {
			p += "; dropped"
		}
		parts = append(parts, p+")")
	}
	if len(s.Unreachable) > 0 {
		parts = append(parts, "unreachable "+strings.Join(s.Unreachable, ","))
	}
	if len(s.Refuted) > 0 {
		parts = append(parts, "digests refuted "+strings.Join(s.Refuted, ","))
	}
	if s.Frozen > 0 {
		parts = append(parts, fmt.Sprintf("%d chunks frozen", s.Frozen))
	}
	if len(s.LeaseRevoked) > 0 {
		parts = append(parts, "lease revoked "+strings.Join(s.LeaseRevoked, ","))
	}
	return dash(strings.Join(parts, ", "))
}
