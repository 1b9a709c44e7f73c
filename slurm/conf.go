package slurm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultConf is where Slurm's own commands look for slurm.conf when
// SLURM_CONF is not set (Debian's packages and a default source build).
const DefaultConf = "/etc/slurm/slurm.conf"

// ErrNoNodeName reports that slurm.conf defines no node for this host. Test
// for it with errors.Is; the caller then falls back to the short hostname,
// which is what slurmd itself would try.
var ErrNoNodeName = errors.New("slurm.conf defines no node for this host")

// NodeDef is one NodeName= line of slurm.conf, reduced to what names a node:
// the NodeName and NodeHostname values as written (either may be a hostlist).
type NodeDef struct {
	Name     string
	Hostname string
}

// ParseNodeDefs reads the NodeName= lines of a slurm.conf and the files it
// Includes. It does no I/O: includes are returned for the caller to read.
//
// Lines are read as Slurm reads them (confLines: comments, continued lines,
// escapes; confPairs: key=value pairs, keys case-insensitive), and
// "NodeName=DEFAULT" sets defaults for the lines after it rather than naming
// a node, so it is left out.
func ParseNodeDefs(conf []byte) (nodes []NodeDef, includes []string) {
	for _, line := range confLines(conf) {
		if f := strings.Fields(line); strings.EqualFold(f[0], "include") && len(f) > 1 {
			includes = append(includes, f[1])
			continue
		}
		pairs := confPairs(line)
		if len(pairs) == 0 || !strings.EqualFold(pairs[0].key, "NodeName") || strings.EqualFold(pairs[0].value, "DEFAULT") {
			continue
		}
		def := NodeDef{Name: pairs[0].value}
		for _, p := range pairs[1:] {
			if strings.EqualFold(p.key, "NodeHostname") {
				def.Hostname = p.value
			}
		}
		nodes = append(nodes, def)
	}
	return nodes, includes
}

// MatchNodeName returns the NodeName that nodes give the host called host
// (its short hostname), the way slurmd finds its own name: a node whose
// NodeHostname is host, or, for a line without NodeHostname, whose NodeName
// is host. A line naming many nodes ("NodeName=gpu[001-064]
// NodeHostname=h[001-064]") pairs the two hostlists by position, as
// slurm.conf(5) specifies.
//
// Several nodes on one host (a test cluster running a slurmd per node on
// localhost) is an error, not a guess: reporting for the wrong node would
// tell placement that weights are where they are not.
func MatchNodeName(nodes []NodeDef, host string) (string, error) {
	var found []string
	for _, d := range nodes {
		names, err := Expand(d.Name)
		if err != nil {
			return "", fmt.Errorf("slurm.conf NodeName=%s: %w", d.Name, err)
		}
		hosts := names
		if d.Hostname != "" {
			if hosts, err = Expand(d.Hostname); err != nil {
				return "", fmt.Errorf("slurm.conf NodeName=%s NodeHostname=%s: %w", d.Name, d.Hostname, err)
			}
		}
		for i, h := range hosts {
			if h != host {
				continue
			}
			switch {
			case len(hosts) == len(names):
				found = append(found, names[i])
			case len(hosts) == 1:
				// One hostname for many nodes: every one of them is on it.
				found = append(found, names...)
			default:
				return "", fmt.Errorf("slurm.conf NodeName=%s NodeHostname=%s: %d names for %d hostnames", d.Name, d.Hostname, len(names), len(hosts))
			}
		}
	}
	sort.Strings(found)
	found = compactStrings(found)
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w (%s)", ErrNoNodeName, host)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("slurm.conf puts %d nodes on host %s (%s); name this node explicitly", len(found), host, strings.Join(found, ", "))
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// maxIncludeDepth stops an Include cycle; Slurm's own parser nests far less.
const maxIncludeDepth = 8

// LookupNodeName reads the slurm.conf at path, and the files it includes,
// and returns the NodeName of the host called host. Include paths that are
// relative are taken relative to path's directory, as Slurm does.
func LookupNodeName(path, host string) (string, error) {
	var nodes []NodeDef
	var read func(p string, depth int) error
	read = func(p string, depth int) error {
		if depth > maxIncludeDepth {
			return fmt.Errorf("read %s: includes nested deeper than %d", p, maxIncludeDepth)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		defs, incs := ParseNodeDefs(b)
		nodes = append(nodes, defs...)
		for _, inc := range incs {
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(path), inc)
			}
			matches, err := filepath.Glob(inc)
			if err != nil || len(matches) == 0 {
				matches = []string{inc}
			}
			for _, m := range matches {
				if err := read(m, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := read(path, 0); err != nil {
		return "", err
	}
	return MatchNodeName(nodes, host)
}
