package coordinator

import (
	"context"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/api"
)

// A node's fabric is Slurm's word, not the node's (issue 24): with
// fabric_features set, the fabric of a node is the one of those features
// Slurm lists it with (slurm.conf Feature=ib-a), read with the node list the
// coordinator reads for MUNGE (identity.go), and a report that names
// another is refused. A node that could name its own fabric joined another
// fabric's swarms and was offered there as a peer, across fabrics that are
// not connected. Without fabric_features (one fabric, or no Slurm to ask)
// the report's fabric stands, and `llmgw doctor` says so (Status.FabricsFrom).

// fabricsFrom is where this coordinator takes nodes' fabrics from, as
// status says it (api.Status.FabricsFrom).
func (s *Server) fabricsFrom() string {
	if len(s.cfg.FabricFeatures) > 0 {
		return api.FabricsFromSlurm
	}
	return api.FabricsFromNodes
}

// slurmFabric is node's fabric as Slurm's node list has it: the one of
// fabric_features among its features, DefaultFabric when it has none, or
// why it cannot be told.
func (s *Server) slurmFabric(ctx context.Context, node string) (string, error) {
	kn, ok, err := s.known.node(ctx, node)
	features := strings.Join(s.cfg.FabricFeatures, ", ")
	switch {
	case err != nil:
		return "", api.Errorf(api.CodeUnavailable, "report from %s: Slurm's node list could not be read (%v), and with fabric_features (%s) a node's fabric is taken from it; report again", node, err, features)
	case !ok:
		return "", api.Errorf(api.CodeInvalid, "report from %s: %s is not in Slurm's node list (sinfo), and with fabric_features (%s) a node's fabric is its feature there; name the node as slurm.conf does (agent.toml node), or add it to slurm.conf", node, node, features)
	}
	var in []string
	for _, f := range s.cfg.FabricFeatures {
		if slices.Contains(kn.Features, f) {
			in = append(in, f)
		}
	}
	switch len(in) {
	case 0:
		return DefaultFabric, nil
	case 1:
		return in[0], nil
	}
	return "", api.Errorf(api.CodeInvalid, "report from %s: Slurm lists %s with features %s, all of them fabric_features; a node is in one fabric: correct its Feature= in slurm.conf", node, node, strings.Join(in, " and "))
}

// nodeAddrs are the addresses the coordinator binds node's MUNGE
// credentials to (Slurm's NodeAddr and NodeHostname, resolved), as a swarm
// plan lists them for chunk servers (api.SwarmMember); bound is false when
// the coordinator reads no node list (neither munge_socket nor
// fabric_features), and knows no node's addresses.
func (s *Server) nodeAddrs(ctx context.Context, node string) (addrs []string, bound bool) {
	if s.known == nil {
		return nil, false
	}
	as, _ := s.known.lookup(ctx, node)
	for _, a := range as {
		addrs = append(addrs, a.String())
	}
	return addrs, true
}
