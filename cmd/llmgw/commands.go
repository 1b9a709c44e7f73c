package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// env is what a command may touch of the process: its streams and its
// environment. Tests pass buffers and a map.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// isTerminal reports whether w is a terminal, for progress bars and colour.
func (e *env) isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// A command is one subcommand of llmgw.
type command struct {
	name     string
	synopsis string // the arguments, as in "SOURCE [--cache-dir DIR]"
	summary  string // one line for llmgw help
	run      func(ctx context.Context, e *env, args []string) error
}

// commands lists every subcommand, in the order llmgw help shows them. Only
// commands that work are listed: a command that does not work yet is not
// here at all. (Assigned in init because help refers back to the table.)
var commands []command

func init() {
	commands = []command{
		// The services, then the operator's commands, then node-side tools.
		{name: "coordinator", synopsis: "[--config FILE] [--listen ADDR] [--db PATH]", summary: "run the coordinator: the catalog, node reports, per-fabric status", run: coordinatorCmd},
		{name: "agent", synopsis: "[--config FILE] [--coordinator URL] [--node NAME] [--fabric NAME] [--weights-dir DIR]... [--cache-dir DIR] [--socket PATH] [--once]", summary: "run the node agent: scan weights, report, serve the hooks", run: agentCmd},
		{name: "models", synopsis: "add NAME SOURCE [--size BYTES] [--sha256 HEX] [--gpu-memory BYTES] | add NAME hf:ORG/REPO[@REV] [--include GLOB]... [--exclude GLOB]... | rm NAME | mv OLD NEW | repin NAME | list [--json]", summary: "show and change the model catalog", run: modelsCmd},
		{name: "status", synopsis: "[MODEL] [--json]", summary: "per fabric: which models are held (shared/local), fetching, stale nodes", run: statusCmd},
		{name: "nodes", synopsis: "token NODE [--out FILE] | rm NODE", summary: "make a node's own token; forget a node", run: nodesCmd},
		{name: "gc", synopsis: "[--collect [--force]] [--trust] [--node NAME] [--json]", summary: "reclaim fetched weights no catalog entry wants, node by node (lists unless --collect)", run: gcCmd},
		{name: "seed", synopsis: "MODEL --fabric F [--copies K | --nodes HOSTLIST] [--wait DURATION | --no-wait] [--ask-for DURATION] [--json]", summary: "put copies of a model into a fabric before jobs ask (one origin read, then peers)", run: seedCmd},
		{name: "warm", synopsis: "JOB [--model M] [--nodes HOSTLIST] [--json]", summary: "say whether a job that asked to wait for its weights may start (for burst_buffer.lua)", run: warmCmd},
		{name: "features", synopsis: "[--dry-run] [--json]", summary: "reconcile Slurm node features now (through the coordinator)", run: featuresCmd},
		{name: "place", synopsis: "--model M [-N COUNT] [--partition P] [--json]", summary: "rank nodes for a job that wants a model, with the reasons", run: placeCmd},
		{name: "scan", synopsis: "DIR... [--json] [--catalog FILE]", summary: "list the weights in DIRs as this node would report them", run: scanCmd},
		{name: "fetch", synopsis: "SOURCE|MODEL [--cache-dir DIR] [--hf-cache DIR] [--sha256 HEX] [--connections N]", summary: "make a model file or a catalog model present on this node and print its path", run: fetchCmd},
		{name: "sbatch", synopsis: "--model M [sbatch options] SCRIPT [ARGS]", summary: "submit a job with sbatch, preferring nodes that hold model M", run: sbatchCmd},
		{name: "demo", synopsis: "[--no-fuse] [--no-cluster] [--tmp DIR]", summary: "run the whole flow on this machine: coordinator, agents, fetch, status (cleans up after itself)", run: demoCmd},
		{name: "doctor", synopsis: "[--config FILE] [--json] [agent flags]", summary: "check this host's Slurm and llmgw setup and say how to fix each problem", run: doctorCmd},
		{name: "prolog", synopsis: "[--config FILE] [agent flags]", summary: "Slurm Prolog: make the job's model present on this node (always exits 0)", run: prologCmd},
		{name: "task-prolog", synopsis: "[--config FILE] [agent flags]", summary: "Slurm TaskProlog: export LLMGW_MODEL_PATH, or fail the job with the reason", run: taskPrologCmd},
		{name: "epilog", synopsis: "[--config FILE] [agent flags]", summary: "Slurm Epilog: clear the job's record, run node gc now and then (always exits 0)", run: epilogCmd},
		{name: "version", summary: "print the version", run: versionCmd},
		{name: "help", synopsis: "[COMMAND]", summary: "show help for llmgw or for one command", run: helpCmd},
	}
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usageError is a mistake in how a command was called. It exits 2 and says
// what to do instead.
type usageError struct {
	msg  string
	hint string
}

func (e *usageError) Error() string { return e.msg }

func usagef(hint, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), hint: hint}
}

// run runs llmgw with args (without the program name) and returns the exit
// status: 0 on success, 1 when the command failed, 2 when it was called wrong.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) == 0 {
		printHelp(e.stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help":
		printHelp(e.stdout)
		return 0
	case "-v", "--version":
		name = "version"
	}
	cmd := lookup(name)
	if cmd == nil {
		hint := "Run 'llmgw help' for the list of commands."
		if s := suggest(name); s != "" {
			hint = fmt.Sprintf("Did you mean 'llmgw %s'? %s", s, hint)
		}
		fmt.Fprintf(e.stderr, "llmgw: unknown command %q. %s\n", name, hint)
		return 2
	}
	err := cmd.run(ctx, e, rest)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		msg := "llmgw " + cmd.name + ": " + ue.msg
		if ue.hint != "" {
			msg += ". " + ue.hint
		}
		fmt.Fprintln(e.stderr, msg)
		return 2
	default:
		fmt.Fprintf(e.stderr, "llmgw %s: %v\n", cmd.name, err)
		var ec exitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
}

// exitCoder lets an error choose the exit status: llmgw sbatch passes
// sbatch's own through, so a script that tests it sees what sbatch said.
type exitCoder interface{ ExitCode() int }

// suggest returns the command whose name is closest to a mistyped one, when
// one is close enough to be worth saying.
func suggest(name string) string {
	best, bestD := "", 3
	for _, c := range commands {
		if d := editDistance(name, c.name); d < bestD {
			best, bestD = c.name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `llmgw: model-weight presence and distribution for Slurm clusters.

Usage: llmgw COMMAND [ARGS]

Commands:
`)
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'llmgw COMMAND --help' for a command's arguments and flags.
Clients find the coordinator through --coordinator URL or LLMGW_COORDINATOR.
`)
}

func helpCmd(_ context.Context, e *env, args []string) error {
	if len(args) == 0 {
		printHelp(e.stdout)
		return nil
	}
	if len(args) > 1 {
		return usagef("Run 'llmgw help COMMAND'", "help takes one command, got %d arguments", len(args))
	}
	c := lookup(args[0])
	if c == nil {
		return usagef("Run 'llmgw help' for the list of commands", "unknown command %q", args[0])
	}
	return c.run(context.Background(), e, []string{"--help"})
}

func versionCmd(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "", "Prints the version of this llmgw binary.")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("", "version takes no arguments")
	}
	fmt.Fprintf(e.stdout, "llmgw %s\n", version)
	return nil
}

// newFlags returns the flag set of one subcommand: errors are returned, not
// printed and exited on, and --help prints the synopsis, what the command
// does, and its flags to stdout.
func newFlags(e *env, name, synopsis, about string) *pflag.FlagSet {
	fs := pflag.NewFlagSet("llmgw "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: llmgw %s %s\n\n%s\n", name, synopsis, strings.TrimSpace(about))
		if fs.HasAvailableFlags() {
			fmt.Fprintf(e.stdout, "\nFlags:\n%s", fs.FlagUsages())
		}
	}
	return fs
}

// parse parses args into fs and turns pflag's errors into usage errors that
// name the command and say how to get help.
func parse(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		return err // pflag has already called fs.Usage
	}
	if err != nil {
		return usagef("Run '"+fs.Name()+" --help' for its flags", "%v", err)
	}
	return nil
}
