package slurm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// A node listing (sinfo, scontrol show node) carries every node's whole
// record, its AvailableFeatures included, and llmgw's superset makes those
// most of it: at 10,000 nodes each offering 200 models of 64-character
// names, 142 MB (docs/slurm/behaviour.md §11). slurmctld packs that for
// every listing whatever the client prints; what the client prints, and
// the coordinator parses, is another matter. So the reads here ask sinfo
// for what each use needs in the form that prints least:
//   - ListNodes: every node once, with its state, partitions, addresses
//     and active features, but not its available ones (`sinfo -N` with a
//     format that leaves %f out): a few hundred bytes a node.
//   - AvailableSets: the available features grouped by sinfo itself (no
//     -N), one line per distinct set and partition. Without a NodeFeatures
//     plugin every node of a config record has its record's string, so
//     there are about as many lines as records.
//   - UnlistedNodes: the nodes slurmctld has and sinfo does not show
//     (FUTURE ones; those in no partition), whose records a write to the
//     listed nodes alone would split; read only when a record is written.
// Each falls back to Nodes (sinfo -N --json, every node whole) when the
// text cannot be read safely: a feature holding the '|' the text form
// splits on.

// NodeList is the nodes one read of Slurm saw.
type NodeList struct {
	// Nodes are the listed nodes, each once, in sinfo's order.
	Nodes []Node
	// Default is the default partition (sinfo marks it with '*'), "" when
	// there is none or the read could not tell.
	Default string
	// Available says the nodes' Available sets were read; without it they
	// are nil, not empty.
	Available bool
}

// listFormat is what ListNodes asks sinfo -N for: name, active features,
// state, partition, NodeAddr, NodeHostname. One line per node and partition
// (-N; sinfo groups nothing then).
const listFormat = "%N|%b|%T|%P|%o|%n"

// availFormat is what AvailableSets asks sinfo for, without -N: sinfo
// prints one line per distinct combination of the printed fields (and
// partition), with the nodes as one hostlist.
const availFormat = "%N|%f"

// ReadNodes reads the listed nodes (ListNodes) and, when available is
// true, their available sets too (AvailableSets). Either read that cannot
// be taken as text is replaced by one read of every node whole (Nodes), so
// the answer is never less than Nodes' would be.
func (r *Runner) ReadNodes(ctx context.Context, available bool) (NodeList, error) {
	list, err := r.ListNodes(ctx)
	if err != nil && !isTextError(err) {
		return NodeList{}, err
	}
	if err == nil && available {
		var sets map[string][]string
		sets, err = r.AvailableSets(ctx)
		if err != nil && !isTextError(err) {
			return NodeList{}, err
		}
		if err == nil {
			err = fillAvailable(list.Nodes, sets)
		}
		if err == nil {
			list.Available = true
		}
	}
	if err == nil {
		return list, nil
	}
	// The text said something it cannot say safely: every node whole.
	nodes, jerr := r.Nodes(ctx)
	if jerr != nil {
		return NodeList{}, fmt.Errorf("%v; reading every node whole instead: %w", err, jerr)
	}
	out := NodeList{Nodes: nodes, Available: true}
	if p, perr := r.Run(ctx, "sinfo", "-a", "-h", "-o", "%P"); perr == nil {
		out.Default = parseDefault(p)
	}
	return out, nil
}

// textError is a node listing in the text form that cannot be read safely.
type textError struct{ msg string }

func (e *textError) Error() string { return e.msg }

func isTextError(err error) bool {
	_, ok := err.(*textError)
	return ok
}

// ListNodes lists every node sinfo shows (-a: hidden partitions too), once,
// with its state, active features, partitions and addresses; Available is
// left nil (see AvailableSets). FUTURE nodes and nodes in no partition are
// not listed (UnlistedNodes).
func (r *Runner) ListNodes(ctx context.Context) (NodeList, error) {
	out, err := r.Run(ctx, "sinfo", "-a", "-N", "-h", "-o", listFormat)
	if err != nil {
		return NodeList{}, err
	}
	return ParseNodeList(out)
}

// ParseNodeList parses `sinfo -a -N -h -o '%N|%b|%T|%P|%o|%n'`: a node in
// several partitions comes once per partition and is gathered into one
// Node. It does no I/O, so it is tested on output captured from each
// release. A line that does not have exactly six fields (a feature set by
// hand with a '|' in it) is a *textError: the caller reads the JSON instead.
func ParseNodeList(out []byte) (NodeList, error) {
	var list NodeList
	at := map[string]int{}
	for i, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 6 {
			return NodeList{}, &textError{fmt.Sprintf("sinfo line %d %.80q: want 6 '|'-separated fields, got %d (a feature with a '|' in it?)", i+1, line, len(f))}
		}
		name, active, state, part, addr, host := f[0], f[1], f[2], f[3], f[4], f[5]
		if name == "" || state == "" {
			return NodeList{}, &textError{fmt.Sprintf("sinfo line %d %.80q: no node name or no state", i+1, line)}
		}
		if p, ok := strings.CutSuffix(part, "*"); ok {
			part = p
			list.Default = p
		}
		if j, ok := at[name]; ok {
			if part != "" && !slices.Contains(list.Nodes[j].Partitions, part) {
				list.Nodes[j].Partitions = append(list.Nodes[j].Partitions, part)
			}
			continue
		}
		at[name] = len(list.Nodes)
		n := Node{Name: name, Active: splitFeatures(active), State: state, Addr: addr, Hostname: host}
		if part != "" {
			n.Partitions = []string{part}
		}
		list.Nodes = append(list.Nodes, n)
	}
	return list, nil
}

// AvailableSets reads the listed nodes' available features as sinfo groups
// them, and returns each node's set. Nodes with one set share one slice:
// it must not be changed.
func (r *Runner) AvailableSets(ctx context.Context) (map[string][]string, error) {
	out, err := r.Run(ctx, "sinfo", "-a", "-h", "-o", availFormat)
	if err != nil {
		return nil, err
	}
	return ParseAvailableSets(out)
}

// ParseAvailableSets parses `sinfo -a -h -o '%N|%f'`. sinfo prints a
// partition without listed nodes as a line with no hostlist; it names no
// node and is skipped. A node on two lines with two sets (it cannot be, as
// sinfo prints the node's one string) is a *textError, and so is a line
// that is not two fields.
func ParseAvailableSets(out []byte) (map[string][]string, error) {
	sets := map[string][]string{}
	for i, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		hosts, features, ok := strings.Cut(line, "|")
		if !ok || strings.Contains(features, "|") {
			return nil, &textError{fmt.Sprintf("sinfo line %d %.80q: want 2 '|'-separated fields (a feature with a '|' in it?)", i+1, line)}
		}
		if hosts == "" {
			continue
		}
		names, err := Expand(hosts)
		if err != nil {
			return nil, &textError{fmt.Sprintf("sinfo line %d: %v", i+1, err)}
		}
		set := splitFeatures(features)
		for _, n := range names {
			if prev, seen := sets[n]; seen && !slices.Equal(prev, set) {
				return nil, &textError{fmt.Sprintf("sinfo lists node %s with two available sets", n)}
			}
			sets[n] = set
		}
	}
	return sets, nil
}

// fillAvailable gives each node its set; a node the sets lack is a
// *textError (it came or went between the two reads, and the plan must not
// take it for a node without features).
func fillAvailable(nodes []Node, sets map[string][]string) error {
	for i := range nodes {
		set, ok := sets[nodes[i].Name]
		if !ok {
			return &textError{fmt.Sprintf("node %s is listed but its available features were not", nodes[i].Name)}
		}
		nodes[i].Available = set
	}
	return nil
}

// parseDefault finds the partition `sinfo -h -o %P` marks with '*'.
func parseDefault(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutSuffix(strings.TrimSpace(line), "*"); ok && p != "" {
			return p
		}
	}
	return ""
}

// UnlistedNodes returns the nodes slurmctld has that are not in listed:
// FUTURE nodes, which sinfo never shows (22.05 has no sinfo --future), and
// nodes in no partition, which sinfo cannot show. They share config records
// with listed nodes when an admin brought part of a FUTURE NodeName line up
// (scontrol update State=RESUME, or a dynamic node registering), or put only
// some of a line's nodes in partitions: a record write must cover them too,
// or it splits their record. `scontrol -a -F -o show node` lists them: one
// line per node, whole, so it is read only when a record is written.
func (r *Runner) UnlistedNodes(ctx context.Context, listed []Node) ([]Node, error) {
	out, err := r.Run(ctx, "scontrol", "-a", "-F", "-o", "show", "node")
	if err != nil {
		return nil, err
	}
	all, err := ParseShowNodes(out)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(listed))
	for _, n := range listed {
		seen[n.Name] = true
	}
	var unlisted []Node
	for _, n := range all {
		if !seen[n.Name] {
			n.Unlisted = true
			unlisted = append(unlisted, n)
		}
	}
	return unlisted, nil
}

// ParseShowNodes parses `scontrol -o show node`, one node a line, for the
// name, the two feature sets and the state (the whole of it, such as
// FUTURE or IDLE+NOT_RESPONDING, as scontrol prints it). Values with spaces
// (Reason=, OS=) are no concern: only the keys above are read, and their
// values have none.
func ParseShowNodes(out []byte) ([]Node, error) {
	var nodes []Node
	for i, line := range bytes.Split(out, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		name, ok := showValue(line, "NodeName")
		if !ok || name == "" {
			return nil, fmt.Errorf("parse scontrol show node line %d %.80q: no NodeName", i+1, line)
		}
		avail, _ := showValue(line, "AvailableFeatures")
		active, _ := showValue(line, "ActiveFeatures")
		state, _ := showValue(line, "State")
		nodes = append(nodes, Node{Name: name, Available: splitFeatures(avail), Active: splitFeatures(active), State: state})
	}
	return nodes, nil
}

// showValue is the value of key in one line of `scontrol -o show ...`:
// from after "key=" to the next space.
func showValue(line []byte, key string) (string, bool) {
	k := []byte(key + "=")
	i := 0
	for {
		j := bytes.Index(line[i:], k)
		if j < 0 {
			return "", false
		}
		j += i
		if j == 0 || line[j-1] == ' ' {
			v := line[j+len(k):]
			if e := bytes.IndexByte(v, ' '); e >= 0 {
				v = v[:e]
			}
			return string(v), true
		}
		i = j + len(k)
	}
}
