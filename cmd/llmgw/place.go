package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

const placeAbout = `Ranks nodes for a job that wants MODEL, best first, with the reason for each:
nodes holding a complete local copy, then those seeing it on a shared filer,
then nodes fetching it, then nodes whose cache has room to fetch it, then
nodes whose room is unknown. Nodes without room that do not hold it, stale
nodes, nodes Slurm has DOWN or DRAINED and nodes with too little GPU memory
come last. It never refuses: when nobody holds the model, a job fetches it.

With -N COUNT above 1 every node is kept in one fabric, and the fabric whose
nodes can serve the model without fetching is tried first. --partition P
ranks only P's nodes (asked of Slurm with sinfo; SLURM_CONF must reach the
cluster). --json prints the coordinator's answer (GET /v1/placement); its
fields are stable.`

func placeCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "place", lookup("place").synopsis, placeAbout)
	url, tokenFile := coordFlags(fs)
	model := fs.String("model", "", "the catalog model the job wants (required)")
	count := fs.IntP("nodes", "N", 1, "how many nodes the job wants, as sbatch -N")
	partition := fs.StringP("partition", "p", "", "rank only this Slurm partition's nodes")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Try 'llmgw place --model llama -N 2'", "place takes no arguments, got %q", fs.Args())
	}
	if *model == "" {
		return usagef("Try 'llmgw place --model llama'; 'llmgw models list' shows the catalog", "place needs --model")
	}
	if err := catalog.ValidModelName(*model); err != nil {
		return usagef("'llmgw models list' shows the catalog", "%v", err)
	}
	if *count < 1 {
		return usagef("Give -N 1 or more", "-N %d: a job wants at least one node", *count)
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	q := api.PlacementQuery{Model: *model, Count: *count}
	if *partition != "" {
		if q.Nodes, err = partitionNodes(ctx, &slurm.Runner{}, *partition); err != nil {
			return err
		}
	}
	p, err := c.Placement(ctx, q)
	if err != nil {
		return err
	}
	if !*asJSON {
		return table.WritePlacement(e.stdout, p)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// partitionNodes asks Slurm for partition's nodes, as a hostlist.
func partitionNodes(ctx context.Context, r *slurm.Runner, partition string) (string, error) {
	out, err := r.Run(ctx, "sinfo", "-h", "-p", partition, "-o", "%N")
	if err != nil {
		return "", fmt.Errorf("nodes of partition %s: %w", partition, err)
	}
	// sinfo prints one line per node state group (n[1-2] idle, n3 down);
	// the lines together are the partition. For a partition that does not
	// exist Slurm 22.05 prints nothing and exits 0.
	lists := strings.Fields(string(out))
	if len(lists) == 0 {
		return "", fmt.Errorf("partition %q does not exist in Slurm, or has no nodes; 'sinfo -s' lists the partitions", partition)
	}
	return strings.Join(lists, ","), nil
}
