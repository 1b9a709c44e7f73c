package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/placement"
)

const featuresAbout = `Reconciles Slurm node features now: every node that can serve a catalog model
without fetching gets the feature ` + placement.FeaturePrefix + `MODEL active, every node offers
(AvailableFeatures) the feature of every catalog model, and every other
feature (the site's, such as ib-a) is kept exactly as it is.

AvailableFeatures is written only to whole node config records (after a
reconfigure or restart of slurmctld, or a catalog change), so slurmctld
splits no record; presence is written as ActiveFeatures alone, one call per
distinct set, which adds no record either.

The coordinator does the work, because it holds what every node reports and
runs where scontrol update is allowed; this command asks it to (POST
/v1/features, admin token) and prints the scontrol calls. With --dry-run
nothing is changed. The coordinator also does this by itself on every change
and every feature interval, when it runs with --features.`

func featuresCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "features", lookup("features").synopsis, featuresAbout)
	url, tokenFile := coordFlags(fs)
	dry := fs.Bool("dry-run", false, "print the scontrol calls that would be made, and make none")
	asJSON := fs.Bool("json", false, "print the coordinator's answer as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Run 'llmgw features --help'", "features takes no arguments, got %q", fs.Args())
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	res, err := c.SyncFeatures(ctx, *dry)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		for _, cmd := range res.Commands {
			fmt.Fprintln(e.stdout, cmd)
		}
		verb := "changed"
		if res.DryRun {
			verb = "would change"
		}
		fmt.Fprintf(e.stderr, "%d nodes in Slurm: %d already right, %s %d in %d call(s), %d of them to whole config records (%.0f ms",
			res.Nodes, res.Unchanged, verb, res.Drifted, len(res.Commands)+res.CommandsOmitted, res.Records, res.Duration*1000)
		if res.Paused > 0 {
			fmt.Fprintf(e.stderr, ", %.0f ms of it pacing", res.Paused*1000)
		}
		fmt.Fprintln(e.stderr, ")")
		if res.Unknown != "" {
			fmt.Fprintf(e.stderr, "nodes reporting weights that Slurm does not list (no feature): %s\n", res.Unknown)
		}
		if len(res.Withheld) > 0 {
			fmt.Fprintf(e.stderr, "models with no feature, to keep the node listing within Slurm's message limit: %s\n", strings.Join(res.Withheld, ","))
		}
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}
