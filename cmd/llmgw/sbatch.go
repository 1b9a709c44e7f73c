package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

const sbatchAbout = `Submits a batch job with sbatch, steered towards the nodes that hold model M.

Every sbatch option is passed through untouched, and so is everything after
the script. llmgw adds, before the script:
  --prefer      llmgw.M (with the job's --constraint and --prefer folded in,
                llmgw.M*k when the job wants more nodes than k holders), and
                only when the current node features can satisfy it: Slurm
                rejects a preference nobody can meet;
  --exclude     nodes whose cache has no room for M and that do not hold it
                (asked of the coordinator), merged with the job's own;
  --llmgw-model M when the SPANK plugin is loaded, else llmgw:model=M
                appended to --comment, so the Prolog knows the model;
  --comment     ... llmgw:composed, so job_submit.lua, which knows less,
                leaves the job as composed here.
The node features are the coordinator's (its last read of Slurm), or
sinfo's when its feature reconciler is off. If Slurm still refuses the
preference, the job is submitted again without it. With no coordinator
reachable, only the model is recorded. What was added is
printed on stderr; sbatch's own output and exit status are passed through.`

// sbatchOwnFlags are llmgw's flags among sbatch's; they may come anywhere
// before the script and must be spelled out in full.
var sbatchOwnFlags = []string{"model", "coordinator", "token-file", "slurm-dir"}

// placementTimeout bounds the question to the coordinator: a submission
// must not wait long for a hint.
const placementTimeout = 5 * time.Second

func sbatchCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "sbatch", lookup("sbatch").synopsis, sbatchAbout)
	model := fs.String("model", "", "the model the job uses (required)")
	coordURL, tokenFile := coordFlags(fs)
	slurmDir := fs.String("slurm-dir", slurm.DefaultDir, "directory holding sbatch and sinfo (env LLMGW_SLURM_DIR)")

	opts, own, rest, err := slurm.ParseSbatchArgs(args, sbatchOwnFlags...)
	if err != nil {
		return usagef("Run 'llmgw sbatch --help'", "%v", err)
	}
	before := rest
	if opts.Script >= 0 {
		before = rest[:opts.Script]
	}
	if slices.Contains(before, "--help") || slices.Contains(before, "-h") || slices.Contains(before, "--usage") {
		return parse(fs, []string{"--help"})
	}
	if err := parse(fs, own); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if *model == "" {
		return usagef("Try 'llmgw sbatch --model llama job.sh'", "--model is required")
	}
	if err := catalog.ValidModelName(*model); err != nil {
		return usagef("'llmgw models list' shows the catalog", "--model: %v", err)
	}
	if opts.SpankModel != "" && opts.SpankModel != *model {
		return usagef("Give the model once, with --model", "--model=%s and --llmgw-model=%s disagree", *model, opts.SpankModel)
	}
	warn := func(format string, args ...any) { fmt.Fprintf(e.stderr, "llmgw sbatch: "+format+"\n", args...) }

	// What sbatch will read: the script's #SBATCH lines, SBATCH_* and the
	// command line. A script on stdin is read here and handed on.
	var script, stdin []byte
	switch {
	case opts.Script >= 0:
		if script, err = os.ReadFile(rest[opts.Script]); err != nil {
			warn("cannot read %s for its #SBATCH lines (%v); going by the command line", rest[opts.Script], err)
		}
	case !opts.Wrap:
		if stdin, err = io.ReadAll(e.stdin); err != nil {
			return fmt.Errorf("read the batch script from stdin: %w", err)
		}
		script = stdin
	}
	dopts, _, _, err := slurm.ParseSbatchArgs(slurm.Directives(script))
	if err != nil {
		warn("the script's #SBATCH lines: %v; going by the command line", err)
		dopts = slurm.SbatchOptions{}
	}
	eff := slurm.Effective(dopts, opts, e.getenv)

	r := &slurm.Runner{Dir: *slurmDir}
	in := slurm.ComposeInput{
		Model:      *model,
		Prefix:     placement.FeaturePrefix,
		Constraint: eff.Constraint,
		Prefer:     eff.Prefer,
		Nodes:      eff.Nodes,
		NodeList:   eff.NodeList != "",
		Comment:    eff.Comment,
		Complete:   true,
		Spank:      eff.SpankModel != "" || r.SpankOption(ctx),
		Composed:   true,
	}
	if eff.Exclude != "" {
		if in.Exclude, err = slurm.Expand(eff.Exclude); err != nil {
			return usagef("", "--exclude=%s: %v", eff.Exclude, err)
		}
	}
	// The coordinator says which nodes cannot fetch the model and, when its
	// feature reconciler runs, which features every node has as it last
	// read Slurm: slurmctld is not asked for every node by every
	// submission, as the submitting user, whom its rate limit throttles.
	// sinfo only when the coordinator has no view. Without the
	// coordinator, only the model is recorded: features alone are no basis
	// to steer by when the service that publishes them is down.
	pctx, cancel := context.WithTimeout(ctx, placementTimeout)
	p, perr := placementFrom(pctx, *coordURL, *tokenFile, *model, max(eff.Nodes, 1))
	cancel()
	var cluster []slurm.FeatureNode
	var def string
	var ferr error
	switch {
	case perr != nil:
		warn("warning: no placement from the coordinator (%v); recording the model only", perr)
	case p.View != nil:
		cluster, def = viewNodes(p.View)
	default:
		if cluster, def, ferr = r.FeatureNodes(ctx); ferr != nil {
			warn("cannot read the node features (%v); submitting without a preference", ferr)
		}
	}
	if eff.Partition != "" {
		in.Partitions = strings.Split(eff.Partition, ",")
	} else if def != "" {
		in.Partitions = []string{def}
	}
	if perr == nil && ferr == nil {
		in.Cluster, in.NoRoom = cluster, noRoom(p, cluster, in.Partitions)
	}

	c := slurm.Compose(in)
	if eff.SpankModel != "" {
		c.SpankModel = "" // the user gave --llmgw-model already
	}
	for _, n := range c.Notes {
		warn("%s", n)
	}
	if added := c.Args(true); len(added) > 0 {
		warn("adding %s", strings.Join(added, " "))
	}
	status, err := r.Submit(ctx, slurm.Submission{Args: rest, Script: opts.Script, Added: c, Stdin: stdin}, e.stdout, e.stderr,
		func(refusal string) {
			warn("Slurm refused the preference (%s); submitting again without --prefer", refusal)
		})
	if err != nil {
		return err
	}
	if status != 0 {
		return sbatchExit(status)
	}
	return nil
}

// sbatchExit passes sbatch's exit status through as llmgw's.
type sbatchExit int

func (s sbatchExit) Error() string { return "sbatch exited with status " + strconv.Itoa(int(s)) }
func (s sbatchExit) ExitCode() int { return int(s) }

// placementFrom asks the coordinator named by the flags for the placement
// ranking of model over every node it knows, with its view of Slurm's
// nodes.
func placementFrom(ctx context.Context, coordURL, tokenFile, model string, count int) (*api.Placement, error) {
	if coordURL == "" {
		return nil, errors.New("no coordinator given (--coordinator URL or LLMGW_COORDINATOR)")
	}
	c, err := coordClient(coordURL, tokenFile)
	if err != nil {
		return nil, err
	}
	return c.Placement(ctx, api.PlacementQuery{Model: model, Count: count, View: true})
}

// noRoom is the nodes the job may run on (in one of partitions, or any
// when none is known) that cannot take it: they do not hold the model and
// their cache lacks the room to fetch it (api.PlacementNode.NoRoom), so a
// job there would fail its fetch. A node that holds the model needs no
// room and is never among them.
func noRoom(p *api.Placement, cluster []slurm.FeatureNode, partitions []string) []string {
	may := map[string]bool{}
	for _, nd := range cluster {
		if len(partitions) == 0 || slices.ContainsFunc(nd.Partitions, func(p string) bool { return slices.Contains(partitions, p) }) {
			may[nd.Name] = true
		}
	}
	var out []string
	for _, n := range p.Nodes {
		if n.NoRoom && may[n.Node] {
			out = append(out, n.Node)
		}
	}
	return out
}

// viewNodes is the coordinator's view as Compose takes nodes.
func viewNodes(v *api.FeatureView) ([]slurm.FeatureNode, string) {
	nodes := make([]slurm.FeatureNode, len(v.Nodes))
	for i, n := range v.Nodes {
		nodes[i] = slurm.FeatureNode{Name: n.Name, Partitions: n.Partitions, Features: n.Features}
	}
	return nodes, v.Default
}
