package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
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
	// Addr and Hostname are the node's NodeAddr and NodeHostname, where
	// its daemons (and so its munged) speak from, when the read says them
	// (the text form does; 22.05's JSON does, later releases' sinfo
	// records leave them empty).
	Addr, Hostname string
	// Unlisted says slurmctld has the node but sinfo does not list it: a
	// FUTURE node, or one in no partition (UnlistedNodes). No job runs
	// there; it matters only as a member of a config record.
	Unlisted bool
}

// Nodes lists the cluster's nodes, each once, in sinfo's order, from
// `sinfo -N --json`. JSON rather than the text form because scontrol update
// accepts any feature name, '|' included, and the text form splits on '|': a
// site's odd feature must not stop llmgw from reading every other node.
// FUTURE nodes are not listed (sinfo never shows them).
//
// -N because from 23.02 plain `sinfo --json` prints sinfo's grouped records,
// one per state and partition, whose features are one member's: four idle
// nodes came back as one record carrying ib-a, two of them being ib-b
// (slurm/testdata/24.11/fresh/sinfo-json.json). No --json=v0.0.xx: each data
// parser is dropped about three releases after it came, so the shape is read
// as it comes (ParseNodesJSON). When sinfo cannot print JSON at all (a
// Slurm built without its JSON serializer), or prints a shape not known
// here, the text form is read instead, so the reconciler keeps working.
func (r *Runner) Nodes(ctx context.Context) ([]Node, error) {
	out, err := r.Run(ctx, "sinfo", "-N", "--json")
	if err == nil {
		nodes, perr := ParseNodesJSON(out)
		if perr == nil {
			return nodes, nil
		}
		err = perr
	} else if !noJSON(err) {
		// A controller that does not answer would not answer the text
		// form either: asking again would only double the wait.
		return nil, err
	}
	text, terr := r.Run(ctx, "sinfo", "-N", "-h", "-o", nodeFormat)
	if terr != nil {
		return nil, fmt.Errorf("%w; the text form failed too: %v", err, terr)
	}
	nodes, terr := ParseNodes(text)
	if terr != nil {
		return nil, fmt.Errorf("%w; the text form too: %v (Slurm %s)", err, terr, r.release(ctx))
	}
	return nodes, nil
}

// noJSON reports whether sinfo failed for want of its JSON output (a Slurm
// built without the serializer or data_parser plugins), not for want of a
// controller.
func noJSON(err error) bool {
	var ce *CommandError
	if !errors.As(err, &ce) {
		return false
	}
	var exit *exec.ExitError
	if !errors.As(ce.Err, &exit) {
		return false // not started, or out of time
	}
	msg := strings.ToLower(ce.Stderr)
	return strings.Contains(msg, "json") || strings.Contains(msg, "serializer") || strings.Contains(msg, "data_parser")
}

// nodeFormat is the text form ParseNodes reads.
const nodeFormat = "%N|%f|%b|%T"

// release names the running Slurm for an error message, from `sinfo
// --version`.
func (r *Runner) release(ctx context.Context) string {
	out, err := r.Run(ctx, "sinfo", "--version")
	if err != nil {
		return "release unknown: sinfo --version failed"
	}
	v, err := ParseVersion(out)
	if err != nil {
		return "release unknown"
	}
	return v.String()
}

// nodesJSON is the part of Slurm's node listings that llmgw reads, in every
// shape they come in:
//   - 22.05's `sinfo --json` and `scontrol show nodes --json` (openapi
//     v0.0.38): .nodes[], features as a comma-separated string, state a
//     string and state_flags a list;
//   - 23.02 and later `scontrol show nodes --json`: .nodes[], features as
//     lists, state a list such as ["IDLE","DRAIN"];
//   - 23.02 and later `sinfo --json`: .sinfo[] records, each a group of
//     nodes under .nodes.nodes with one .features and one .node.state and
//     one .partition; trustworthy per node only with -N, one node a record.
//
// encoding/json matches keys without regard to case, so .meta.Slurm (22.05)
// and .meta.slurm (later) both fill Meta.Slurm.
type nodesJSON struct {
	Meta struct {
		Slurm struct {
			Release string `json:"release"`
		} `json:"slurm"`
	} `json:"meta"`
	Errors []json.RawMessage `json:"errors"`
	Nodes  *[]struct {
		Name           string       `json:"name"`
		Features       jsonFeatures `json:"features"`
		ActiveFeatures jsonFeatures `json:"active_features"`
		State          jsonList     `json:"state"`
		StateFlags     []string     `json:"state_flags"`
		Partitions     []string     `json:"partitions"`
		Address        string       `json:"address"`
		Hostname       string       `json:"hostname"`
	} `json:"nodes"`
	Sinfo *[]struct {
		Nodes struct {
			Nodes []string `json:"nodes"`
		} `json:"nodes"`
		Features struct {
			Total  string `json:"total"`
			Active string `json:"active"`
		} `json:"features"`
		Node struct {
			State jsonList `json:"state"`
		} `json:"node"`
		Partition struct {
			Name string `json:"name"`
		} `json:"partition"`
	} `json:"sinfo"`
}

// jsonFeatures is a feature list written either way Slurm has: "a,b" (22.05)
// or ["a","b"] (23.02 and later).
type jsonFeatures []string

func (f *jsonFeatures) UnmarshalJSON(b []byte) error {
	var l jsonList
	if err := l.UnmarshalJSON(b); err != nil {
		return err
	}
	var out []string
	for _, s := range l {
		out = append(out, splitFeatures(s)...)
	}
	*f = out
	return nil
}

// jsonList is a list of strings, or one string (22.05's state), or null.
type jsonList []string

func (l *jsonList) UnmarshalJSON(b []byte) error {
	var one *string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = nil
		if one != nil && *one != "" {
			*l = jsonList{*one}
		}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %.40s", b)
	}
	*l = many
	return nil
}

// baseStates are the node states Slurm's state lists start with; the rest
// of a list are flags (src/common/slurm_protocol_defs.c, node_state_string).
var baseStates = map[string]bool{
	"UNKNOWN": true, "DOWN": true, "IDLE": true, "ALLOCATED": true, "ERROR": true,
	"MIXED": true, "FUTURE": true, "END": true,
}

// stateOf splits a state given as a list (["IDLE","DRAIN"]) into its base
// state and flags, adding 22.05's separate flags, and names it as sinfo's
// %T does.
func stateOf(l []string, flags []string) string {
	base := ""
	var rest []string
	for _, s := range l {
		if base == "" && baseStates[strings.ToUpper(s)] {
			base = s
			continue
		}
		rest = append(rest, s)
	}
	if base == "" {
		return ""
	}
	return stateLong(base, append(rest, flags...))
}

// ParseNodesJSON parses a node listing of any Slurm from 22.05 on: `sinfo
// -N --json` or `scontrol show nodes --json` (see nodesJSON for the shapes).
// It does no I/O, so it is tested on output captured from real Slurm
// (slurm/testdata/*/). State is given the form sinfo's %T prints (see
// stateLong), so both readers agree. Each error names the Slurm release
// the output says it came from.
func ParseNodesJSON(out []byte) ([]Node, error) {
	var doc nodesJSON
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse sinfo --json (Slurm release unknown: the output is not Slurm's JSON): %w", err)
	}
	rel := doc.Meta.Slurm.Release
	if rel == "" {
		rel = "release unknown"
	}
	if len(doc.Errors) > 0 {
		return nil, fmt.Errorf("sinfo --json reports errors (Slurm %s): %s", rel, joinRaw(doc.Errors))
	}
	switch {
	case doc.Nodes != nil:
		return nodesFromList(doc, rel)
	case doc.Sinfo != nil:
		return nodesFromSinfo(doc, rel)
	}
	return nil, fmt.Errorf("parse sinfo --json (Slurm %s): neither a \"nodes\" nor a \"sinfo\" list; is this the JSON of sinfo -N or scontrol show nodes?", rel)
}

func nodesFromList(doc nodesJSON, rel string) ([]Node, error) {
	nodes := make([]Node, 0, len(*doc.Nodes))
	seen := make(map[string]bool, len(*doc.Nodes))
	for i, n := range *doc.Nodes {
		state := stateOf(n.State, n.StateFlags)
		if n.Name == "" || state == "" {
			return nil, fmt.Errorf("parse sinfo --json (Slurm %s): node %d has no name or no state (%q)", rel, i, []string(n.State))
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
			Available:  n.Features,
			Active:     n.ActiveFeatures,
			State:      state,
			Partitions: parts,
			Addr:       n.Address,
			Hostname:   n.Hostname,
		})
	}
	return nodes, nil
}

// nodesFromSinfo reads sinfo's records, which must be one node each (-N):
// a record for several nodes carries one member's features, so it is
// refused rather than spread over the others. A node in several
// partitions comes once per partition; its partitions are gathered.
func nodesFromSinfo(doc nodesJSON, rel string) ([]Node, error) {
	var nodes []Node
	at := map[string]int{}
	for i, r := range *doc.Sinfo {
		names := r.Nodes.Nodes
		if len(names) != 1 {
			return nil, fmt.Errorf("parse sinfo --json (Slurm %s): record %d is for %d nodes (%s), whose features sinfo does not list one by one; run sinfo -N --json", rel, i, len(names), strings.Join(names, ","))
		}
		state := stateOf(r.Node.State, nil)
		if names[0] == "" || state == "" {
			return nil, fmt.Errorf("parse sinfo --json (Slurm %s): record %d has no node name or no state (%q)", rel, i, []string(r.Node.State))
		}
		if j, ok := at[names[0]]; ok {
			if p := r.Partition.Name; p != "" && !slices.Contains(nodes[j].Partitions, p) {
				nodes[j].Partitions = append(nodes[j].Partitions, p)
			}
			continue
		}
		at[names[0]] = len(nodes)
		var parts []string
		if r.Partition.Name != "" {
			parts = []string{r.Partition.Name}
		}
		nodes = append(nodes, Node{
			Name:       names[0],
			Available:  splitFeatures(r.Features.Total),
			Active:     splitFeatures(r.Features.Active),
			State:      state,
			Partitions: parts,
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
// prints for them, in the order Slurm's node_state_string decides
// (src/common/slurm_protocol_defs.c): an invalid registration is "inval";
// maintenance or a reboot on a node without jobs names the state ("maint",
// "reboot", "reboot^" once issued); a drained flag makes an idle or down
// node "drained" and a busy one "draining", a failing one likewise
// "fail"/"failing"; otherwise the base state, with the one mark sinfo adds
// for the first flag that has one ($ maintenance, ^ reboot issued, @ reboot
// requested, # powering up, % powering down, ~ powered down, ! power down
// pending, * not responding). placement.Schedulable reads these names.
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
	noResp := ""
	if has("NOT_RESPONDING") {
		noResp = "*"
	}
	jobs := s == "allocated" || s == "mixed"
	if has("INVALID_REG") {
		return "inval"
	}
	if has("MAINTENANCE") && !has("DRAIN") && !jobs && s != "down" {
		return "maint" + noResp
	}
	if (has("REBOOT_REQUESTED") || has("REBOOT_ISSUED")) && !jobs {
		if has("REBOOT_ISSUED") {
			return "reboot^"
		}
		return "reboot" + noResp
	}
	mark := ""
	for _, m := range []struct{ flag, mark string }{
		{"MAINTENANCE", "$"}, {"REBOOT_ISSUED", "^"}, {"REBOOT_REQUESTED", "@"}, {"POWERING_UP", "#"},
		{"POWERING_DOWN", "%"}, {"POWERED_DOWN", "~"}, {"POWER_DOWN", "!"}, {"NOT_RESPONDING", "*"},
	} {
		if has(m.flag) {
			mark = m.mark
			break
		}
	}
	switch {
	case has("DRAIN") && (jobs || has("COMPLETING")):
		return "draining" + mark
	case has("DRAIN"):
		return "drained" + mark
	case has("FAIL") && (s == "allocated" || has("COMPLETING")):
		return "failing" + noResp
	case has("FAIL"):
		return "fail" + noResp
	case s == "allocated" && mark == "" && has("COMPLETING"):
		return "allocated+"
	case s != "allocated" && s != "down" && has("COMPLETING"):
		return "completing" + mark
	}
	return s + mark
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
