package main

import (
	"context"
	"encoding/json"

	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/weights/catalog"
)

const statusAbout = `Shows, per fabric, whether each catalog model can be served without a fetch:
held on a shared filer (seen by N nodes), as local copies on N nodes, or
nowhere (and what a job placed there would fetch); fetches in progress with
percent, rate and ETA, or "stalled" when a fetch has made no progress for a
while; then stale nodes (no report for three intervals) and nodes never asked
to look (no weight directories configured).

With MODEL, explains that model node by node. --json prints the coordinator's
answer as it is (GET /v1/status or /v1/status/MODEL); its fields are stable.`

func statusCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "status", lookup("status").synopsis, statusAbout)
	url, tokenFile := coordFlags(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("Try 'llmgw status' or 'llmgw status MODEL'", "status takes at most one MODEL, got %q", fs.Args())
	}
	if fs.NArg() == 1 {
		if err := catalog.ValidModelName(fs.Arg(0)); err != nil {
			return usagef("'llmgw models list' shows the catalog", "%v", err)
		}
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	var v any
	if fs.NArg() == 1 {
		st, err := c.ModelStatus(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		if !*asJSON {
			return table.WriteModelNodes(e.stdout, st)
		}
		v = st
	} else {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if !*asJSON {
			return table.WriteStatus(e.stdout, st)
		}
		v = st
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
