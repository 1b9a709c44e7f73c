package slurm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// A Node is one Slurm node as sinfo reports it.
type Node struct {
	Name string
	// Available and Active are the node's features (slurm.conf Feature=,
	// or set by scontrol update). A job's --constraint and --prefer match
	// Active. Nil when the node has none.
	Available, Active []string
	// State is sinfo's long state in lower case, with its suffixes:
	// "idle", "mixed", "allocated", "drained", "draining", "down",
	// "idle*" (not responding), and so on.
	State string
	// Partitions are the partitions the node is in, in sinfo's order
	// (without the '*' sinfo's text output marks the default one with).
	// Nil when it is in none.
	Partitions []string
	// Addr and Hostname are the node's NodeAddr and NodeHostname: where
	// its daemons, and so its munged, speak from.
	Addr, Hostname string
}

// Nodes lists the cluster's nodes, each once, in sinfo's order, from
// `sinfo --json`. JSON rather than the text form because scontrol update
// accepts any feature name, '|' included, and the text form splits on '|': a site's odd
// feature must not stop llmgw from reading every other node. FUTURE nodes
// are not listed (sinfo never shows them).
func (r *Runner) Nodes(ctx context.Context) ([]Node, error) {
	out, err := r.Run(ctx, "sinfo", "--json")
	if err != nil {
		return nil, err
	}
	return ParseNodesJSON(out)
}

// sinfoJSON is the part of `sinfo --json` (openapi/v0.0.38 in Slurm 22.05)
// that llmgw reads.
type sinfoJSON struct {
	Errors []json.RawMessage `json:"errors"`
	Nodes  *[]struct {
		Name           string   `json:"name"`
		Features       string   `json:"features"`
		ActiveFeatures string   `json:"active_features"`
		State          string   `json:"state"`
		StateFlags     []string `json:"state_flags"`
		Partitions     []string `json:"partitions"`
		Address        string   `json:"address"`
		Hostname       string   `json:"hostname"`
	} `json:"nodes"`
}

// ParseNodesJSON parses the output of `sinfo --json`. It does no I/O, so it
// is tested on output captured from real Slurm. State is given the form
// sinfo's %T prints (see stateLong), so both readers agree.
func ParseNodesJSON(out []byte) ([]Node, error) {
	var doc sinfoJSON
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse sinfo --json: %w", err)
	}
	if len(doc.Errors) > 0 {
		return nil, fmt.Errorf("sinfo --json reports errors: %s", joinRaw(doc.Errors))
	}
	if doc.Nodes == nil {
		return nil, fmt.Errorf("parse sinfo --json: no \"nodes\" list; is this Slurm's sinfo (22.05 or later)?")
	}
	nodes := make([]Node, 0, len(*doc.Nodes))
	seen := make(map[string]bool, len(*doc.Nodes))
	for i, n := range *doc.Nodes {
		if n.Name == "" || n.State == "" {
			return nil, fmt.Errorf("parse sinfo --json: node %d has no name or no state", i)
		}
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		var parts []string
		if len(n.Partitions) > 0 {
			parts = n.Partitions
		}
		nodes = append(nodes, Node{
			Name:       n.Name,
			Available:  splitFeatures(n.Features),
			Active:     splitFeatures(n.ActiveFeatures),
			State:      stateLong(n.State, n.StateFlags),
			Partitions: parts,
			Addr:       n.Address,
			Hostname:   n.Hostname,
		})
	}
	return nodes, nil
}

func joinRaw(msgs []json.RawMessage) string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = string(m)
	}
	return strings.Join(s, "; ")
}

// stateLong turns the JSON's base state and flags into the name sinfo's %T
// prints for them (Slurm's node_state_string): a drained flag makes an idle
// or down node "drained" and a busy one "draining", a failing one likewise
// "fail"/"failing"; a node that does not answer gets '*'.
func stateLong(base string, flags []string) string {
	s := strings.ToLower(base)
	has := func(f string) bool {
		for _, g := range flags {
			if strings.EqualFold(g, f) {
				return true
			}
		}
		return false
	}
	busy := s == "allocated" || s == "mixed" || has("COMPLETING")
	switch {
	case has("DRAIN") && busy:
		s = "draining"
	case has("DRAIN"):
		s = "drained"
	case has("FAIL") && busy:
		s = "failing"
	case has("FAIL"):
		s = "fail"
	case has("MAINTENANCE"):
		s = "maint"
	case has("COMPLETING"):
		s = "completing"
	}
	if has("NOT_RESPONDING") {
		s += "*"
	}
	return s
}

// ParseNodes parses the output of `sinfo -N -h -o '%N|%f|%b|%T'`. It does no
// I/O, so it is tested on output captured from real Slurm.
//
// sinfo -N prints a node once per partition it is in; ParseNodes keeps the
// first line for each name. sinfo prints "(null)" for a node with no
// available features and an empty field when none are active; both become
// nil.
func ParseNodes(out []byte) ([]Node, error) {
	var nodes []Node
	seen := map[string]bool{}
	for i, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 4 {
			return nil, fmt.Errorf("parse sinfo line %d %q: want 4 '|'-separated fields (node|available|active|state), got %d", i+1, line, len(f))
		}
		if f[0] == "" || f[3] == "" {
			return nil, fmt.Errorf("parse sinfo line %d %q: empty node name or state", i+1, line)
		}
		if seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		nodes = append(nodes, Node{
			Name:      f[0],
			Available: splitFeatures(f[1]),
			Active:    splitFeatures(f[2]),
			State:     f[3],
		})
	}
	return nodes, nil
}

func splitFeatures(s string) []string {
	if s == "" || s == "(null)" {
		return nil
	}
	return strings.Split(s, ",")
}
