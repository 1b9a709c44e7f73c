package slurm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// SbatchOptions is what llmgw needs to know of an sbatch command line: the
// options that composition reads, and where the batch script is. Every
// other option is only stepped over.
type SbatchOptions struct {
	Constraint string // -C/--constraint
	Prefer     string // --prefer
	Nodes      int    // the minimum of -N/--nodes (0: not given)
	Partition  string // -p/--partition (may be a comma list)
	Exclude    string // -x/--exclude (a hostlist)
	NodeList   string // -w/--nodelist
	Comment    string // --comment
	Parsable   bool   // --parsable
	Wrap       bool   // --wrap: no script file
	SpankModel string // --llmgw-model, when the user gave it

	// Script is the index in the parsed arguments of the batch script; the
	// arguments from there on are the script's own. -1 when there is none
	// (--wrap, or the script comes on stdin).
	Script int
}

// sbatchArgs says which of sbatch's options (22.05, `man sbatch`) take an
// argument: 'r' required (the next word when not given with '='), 'o'
// optional (only with '='), 'n' none. getopt_long accepts any unambiguous
// prefix of a long name, and so does ParseSbatchArgs.
var sbatchLong = map[string]byte{
	"account": 'r', "acctg-freq": 'r', "array": 'r', "batch": 'r', "bb": 'r', "bbf": 'r', "begin": 'r',
	"chdir": 'r', "cluster-constraint": 'r', "clusters": 'r', "comment": 'r', "constraint": 'r',
	"container": 'r', "contiguous": 'n', "core-spec": 'r', "cores-per-socket": 'r', "cpu-freq": 'r',
	"cpus-per-gpu": 'r', "cpus-per-task": 'r', "deadline": 'r', "distribution": 'r', "delay-boot": 'r', "dependency": 'r',
	"error": 'r', "exclude": 'r', "exclusive": 'o', "export": 'r', "export-file": 'r',
	"extra-node-info": 'r', "get-user-env": 'o', "gid": 'r', "gpu-bind": 'r', "gpu-freq": 'r',
	"gpus": 'r', "gpus-per-node": 'r', "gpus-per-socket": 'r', "gpus-per-task": 'r', "gres": 'r',
	"gres-flags": 'r', "help": 'n', "hint": 'r', "hold": 'n', "ignore-pbs": 'n', "input": 'r',
	"job-name": 'r', "kill-on-invalid-dep": 'r', "licenses": 'r', "mail-type": 'r', "mail-user": 'r',
	"mcs-label": 'r', "mem": 'r', "mem-bind": 'r', "mem-per-cpu": 'r', "mem-per-gpu": 'r',
	"mincpus": 'r', "network": 'r', "nice": 'o', "no-kill": 'o', "no-requeue": 'n', "nodefile": 'r',
	"nodelist": 'r', "nodes": 'r', "ntasks": 'r', "ntasks-per-core": 'r', "ntasks-per-gpu": 'r',
	"ntasks-per-node": 'r', "ntasks-per-socket": 'r', "open-mode": 'r', "output": 'r',
	"overcommit": 'n', "oversubscribe": 'n', "parsable": 'n', "partition": 'r', "power": 'r',
	"prefer": 'r', "priority": 'r', "profile": 'r', "propagate": 'o', "qos": 'r', "quiet": 'n',
	"reboot": 'n', "requeue": 'n', "reservation": 'r', "signal": 'r', "sockets-per-node": 'r',
	"spread-job": 'n', "switches": 'r', "test-only": 'n', "thread-spec": 'r', "threads-per-core": 'r',
	"time": 'r', "time-min": 'r', "tmp": 'r', "uid": 'r', "usage": 'n', "use-min-nodes": 'n',
	"verbose": 'n', "version": 'n', "wait": 'n', "wait-all-nodes": 'r', "wckey": 'r', "wrap": 'r',
	// The llmgw SPANK plugin's option.
	"llmgw-model": 'r',
}

// sbatchShort maps the short options to their long names.
var sbatchShort = map[byte]string{
	'A': "account", 'a': "array", 'b': "begin", 'D': "chdir", 'M': "clusters", 'C': "constraint",
	'S': "core-spec", 'c': "cpus-per-task", 'd': "dependency", 'e': "error", 'x': "exclude",
	'B': "extra-node-info", 'G': "gpus", 'h': "help", 'H': "hold", 'i': "input", 'J': "job-name",
	'L': "licenses", 'k': "no-kill", 'F': "nodefile", 'w': "nodelist", 'N': "nodes", 'n': "ntasks",
	'o': "output", 'O': "overcommit", 's': "oversubscribe", 'p': "partition", 'q': "qos", 'Q': "quiet",
	't': "time", 'v': "verbose", 'V': "version", 'W': "wait", 'm': "distribution",
}

// ParseSbatchArgs reads an sbatch command line (without "sbatch") the way
// sbatch does: options up to the first argument that is not one (the
// script) or "--"; everything after the script belongs to it. A long
// option unknown here (another site's SPANK option) is taken to carry its
// value with '=', as sbatch cannot know either.
//
// own names long options that are not sbatch's but the caller's (llmgw
// sbatch's --model): each takes a value, may appear anywhere before the
// script, and is returned in ownArgs as "--name=value" instead of in rest,
// the arguments for sbatch. They must be spelled out in full.
func ParseSbatchArgs(args []string, own ...string) (o SbatchOptions, ownArgs, rest []string, err error) {
	o.Script = -1
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				o.Script = len(rest) + 1
			}
			rest = append(rest, args[i:]...)
			return o, ownArgs, rest, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			if slices.Contains(own, name) {
				if !hasVal {
					if i+1 >= len(args) {
						return o, nil, nil, fmt.Errorf("--%s needs a value", name)
					}
					i++
					val = args[i]
				}
				ownArgs = append(ownArgs, "--"+name+"="+val)
				continue
			}
			rest = append(rest, a)
			full, err := longName(name)
			if err != nil {
				return o, nil, nil, err
			}
			if full == "" {
				continue // unknown: passed through as it is
			}
			if sbatchLong[full] == 'r' && !hasVal {
				if i+1 >= len(args) {
					return o, nil, nil, fmt.Errorf("sbatch option --%s needs a value", full)
				}
				i++
				val = args[i]
				rest = append(rest, val)
			}
			if err := o.set(full, val); err != nil {
				return o, nil, nil, err
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			rest = append(rest, a)
			for j := 1; j < len(a); j++ {
				full, ok := sbatchShort[a[j]]
				if !ok {
					return o, nil, nil, fmt.Errorf("unknown sbatch option -%c in %s", a[j], a)
				}
				if sbatchLong[full] != 'r' {
					if err := o.set(full, ""); err != nil {
						return o, nil, nil, err
					}
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return o, nil, nil, fmt.Errorf("sbatch option -%c needs a value", a[j])
					}
					i++
					val = args[i]
					rest = append(rest, val)
				}
				if err := o.set(full, val); err != nil {
					return o, nil, nil, err
				}
				break
			}
		default:
			o.Script = len(rest)
			rest = append(rest, args[i:]...)
			return o, ownArgs, rest, nil
		}
	}
	return o, ownArgs, rest, nil
}

// longName resolves an exact or unambiguous abbreviated long option. An
// unknown one gives "".
func longName(name string) (string, error) {
	if _, ok := sbatchLong[name]; ok {
		return name, nil
	}
	var found []string
	for n := range sbatchLong {
		if strings.HasPrefix(n, name) {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("sbatch option --%s is ambiguous (%s)", name, strings.Join(found, ", "))
}

func (o *SbatchOptions) set(name, val string) error {
	switch name {
	case "constraint":
		o.Constraint = val
	case "prefer":
		o.Prefer = val
	case "nodes":
		lo, _, _ := strings.Cut(val, "-")
		n, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || n < 0 {
			return fmt.Errorf("sbatch -N/--nodes=%s: want a node count such as 2 or 2-4", val)
		}
		o.Nodes = n
	case "partition":
		o.Partition = val
	case "exclude":
		o.Exclude = val
	case "nodelist", "nodefile":
		o.NodeList = val
	case "comment":
		o.Comment = val
	case "parsable":
		o.Parsable = true
	case "wrap":
		o.Wrap = true
	case "llmgw-model":
		o.SpankModel = val
	}
	return nil
}

// Directives returns the options of a batch script's #SBATCH lines, in
// order. sbatch reads them up to the first line that is neither a comment
// nor blank, and a command-line option overrides one given here. Words are
// split on blanks, with single and double quotes grouping; a '#' after a
// blank starts a comment.
func Directives(script []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first && strings.HasPrefix(line, "#!") {
			first = false
			continue
		}
		first = false
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "#") {
			break
		}
		rest, ok := strings.CutPrefix(line, "#SBATCH")
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		out = append(out, splitWords(rest)...)
	}
	return out
}

func splitWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '#' && !in:
			return words
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// Effective merges what sbatch itself would take, in its order of
// precedence: #SBATCH directives, overridden by SBATCH_* environment
// variables (getenv), overridden by the command line.
func Effective(directives, cmdline SbatchOptions, getenv func(string) string) SbatchOptions {
	e := directives
	if v := getenv("SBATCH_CONSTRAINT"); v != "" {
		e.Constraint = v
	}
	if v := getenv("SBATCH_PARTITION"); v != "" {
		e.Partition = v
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&e.Constraint, cmdline.Constraint}, {&e.Prefer, cmdline.Prefer}, {&e.Partition, cmdline.Partition},
		{&e.Exclude, cmdline.Exclude}, {&e.NodeList, cmdline.NodeList}, {&e.Comment, cmdline.Comment},
		{&e.SpankModel, cmdline.SpankModel},
	} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if cmdline.Nodes > 0 {
		e.Nodes = cmdline.Nodes
	}
	e.Parsable = e.Parsable || cmdline.Parsable
	e.Wrap = cmdline.Wrap
	e.Script = cmdline.Script
	return e
}

// PreferRejected reports whether sbatch's stderr says the job was refused
// because of its --prefer: either answer Slurm 22.05 gives for a preference
// no node set can meet (docs/slurm/behaviour.md §1). A job refused so is submitted
// again without the preference.
func PreferRejected(stderr string) bool {
	return strings.Contains(stderr, "Invalid preferred feature specification") ||
		strings.Contains(stderr, "Requested node configuration is not available")
}

// partitionFormat asks sinfo for node, partition (the default marked with
// '*') and active features: the features a job's expression is matched
// against (docs/slurm/behaviour.md §2).
const partitionFormat = "%N|%P|%b"

// FeatureNodes lists every node with the partitions it is in and its active
// features, and names the default partition ("" when there is none).
// Hidden partitions are included (-a): a job may name one.
func (r *Runner) FeatureNodes(ctx context.Context) ([]FeatureNode, string, error) {
	out, err := r.Run(ctx, "sinfo", "-a", "-h", "-N", "-o", partitionFormat)
	if err != nil {
		return nil, "", err
	}
	return ParseFeatureNodes(out)
}

// ParseFeatureNodes parses `sinfo -h -N -o '%N|%P|%b'`: a line per node and
// partition. It does no I/O.
func ParseFeatureNodes(out []byte) ([]FeatureNode, string, error) {
	var nodes []FeatureNode
	index := map[string]int{}
	def := ""
	for i, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 3 || f[0] == "" || f[1] == "" {
			return nil, "", fmt.Errorf("parse sinfo line %d %q: want node|partition|features", i+1, line)
		}
		part, isDef := strings.CutSuffix(f[1], "*")
		if isDef {
			def = part
		}
		j, ok := index[f[0]]
		if !ok {
			j = len(nodes)
			index[f[0]] = j
			nodes = append(nodes, FeatureNode{Name: f[0], Features: splitFeatures(f[2])})
		}
		nodes[j].Partitions = append(nodes[j].Partitions, part)
	}
	return nodes, def, nil
}

// SpankOption reports whether sbatch knows --llmgw-model, that is whether
// the llmgw SPANK plugin is loaded for this cluster's clients.
func (r *Runner) SpankOption(ctx context.Context) bool {
	out, err := r.Run(ctx, "sbatch", "--help")
	return err == nil && bytes.Contains(out, []byte("--llmgw-model"))
}

// Pipe runs the Slurm command name with args, connected to stdin, stdout
// and stderr, and returns its exit status. Unlike Run it has no timeout of
// its own, because `sbatch --wait` lasts as long as the job: ctx bounds it.
// A command that could not be started is an error; one that ran and
// exited non-zero is not.
func (r *Runner) Pipe(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, name string, args ...string) (int, error) {
	cmd, err := r.command(ctx, name, args)
	if err != nil {
		return -1, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && ctx.Err() == nil && ee.ExitCode() >= 0:
		return ee.ExitCode(), nil
	}
	return -1, &CommandError{Args: append([]string{name}, args...), Err: err}
}
