package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

const seedAbout = `Puts copies of catalog model MODEL into fabric F before any job asks for it.
The coordinator picks the nodes (--copies K, default 1: nodes that hold it
already count, then nodes with cache room) or takes the ones named
(--nodes HOSTLIST, all of fabric F), and asks each in the answer to its
reports until the node reports holding the model, or for --ask-for. The
agents fetch it as a job's Prolog would, through the fabric's swarm: one
node reads the origin, the others its chunks over the fabric.

Prints which nodes were asked, then waits (--wait, default 5m) printing
progress on stderr until each holds the model; it exits 1 if one does not
by then (the coordinator keeps asking until --ask-for runs out). --no-wait
returns at once. Needs the admin token (or, with munge, an admin user).
--json prints the coordinator's record of the request (GET /v1/seed/ID)
after the wait; its fields are stable.`

// seedPoll is how often `llmgw seed` reads the request while it waits: a
// node's progress changes with its reports, seconds apart.
const seedPoll = time.Second

func seedCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "seed", lookup("seed").synopsis, seedAbout)
	url, tokenFile := coordFlags(fs)
	fabric := fs.String("fabric", "", "the fabric to put copies in (required; 'llmgw status' lists them)")
	copies := fs.Int("copies", 0, "how many nodes of the fabric should hold it, counting those that do (default 1)")
	nodes := fs.String("nodes", "", "the nodes that should hold it, a hostlist of the fabric's nodes (instead of --copies)")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for every node asked to hold it")
	noWait := fs.Bool("no-wait", false, "return once the nodes are asked")
	askFor := fs.Duration("ask-for", api.SeedAskFor, "how long the coordinator keeps asking the nodes (at most 24h)")
	asJSON := fs.Bool("json", false, "print the coordinator's record of the request as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	// Only where the coordinator is and how to reach it come from the
	// environment: an LLMGW_FABRIC exported for an agent must not choose
	// the fabric an admin seeds.
	if err := applyEnv(fs, onlyEnv(e.getenv, "coordinator", "token-file", "tls-ca")); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return usagef("Try 'llmgw seed llama-70b --fabric ib-a --copies 2'", "seed takes one MODEL, got %q", fs.Args())
	case *fabric == "":
		return usagef("Name the fabric with --fabric F; 'llmgw status' lists them", "seed needs --fabric")
	case fs.Changed("copies") && *nodes != "":
		return usagef("Give --copies K or --nodes HOSTLIST", "--copies and --nodes together")
	case fs.Changed("copies") && *copies < 1:
		return usagef("Give --copies 1 or more", "--copies %d: a fabric gets at least one copy", *copies)
	case *noWait && fs.Changed("wait"):
		return usagef("Give --wait DURATION or --no-wait", "--wait and --no-wait together")
	case *wait <= 0 && !*noWait:
		return usagef("Give --wait a positive duration, or --no-wait", "--wait %s", *wait)
	case *askFor < time.Second || *askFor > 24*time.Hour:
		return usagef("Give --ask-for between 1s and 24h", "--ask-for %s", *askFor)
	}
	model := fs.Arg(0)
	if err := catalog.ValidModelName(model); err != nil {
		return usagef("'llmgw models list' shows the catalog", "%v", err)
	}
	if err := api.ValidFabricName(*fabric); err != nil {
		return usagef("'llmgw status' lists the fabrics", "--fabric: %v", err)
	}
	if *nodes != "" {
		names, err := slurm.Expand(*nodes)
		if err != nil {
			return usagef("Give a Slurm hostlist, e.g. n[1-4]", "--nodes: %v", err)
		}
		for _, n := range names {
			if err := api.ValidNodeName(n); err != nil {
				return usagef("Give a Slurm hostlist, e.g. n[1-4]", "--nodes: %v", err)
			}
		}
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	st, err := c.Seed(ctx, api.SeedRequest{Model: model, Fabric: *fabric, Copies: *copies, Nodes: *nodes, AskFor: askFor.Seconds()})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "llmgw seed: %s\n", seedSummary(st))
	if st.Note != "" {
		fmt.Fprintf(e.stderr, "llmgw seed: note: %s\n", api.EscapeControl(st.Note))
	}
	var waitErr error
	if !*noWait && st.Pending() {
		st, waitErr = waitSeed(ctx, e, c, st, *wait)
		if st.ID == "" {
			return waitErr
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else if err := table.WriteSeed(e.stdout, st); err != nil {
		return err
	}
	return waitErr
}

// onlyEnv is getenv restricted to the variables of the flags named.
func onlyEnv(getenv func(string) string, flags ...string) func(string) string {
	return func(k string) string {
		for _, f := range flags {
			if k == config.EnvName(f) {
				return getenv(k)
			}
		}
		return ""
	}
}

// seedSummary says in a line which nodes were asked and which held it.
func seedSummary(st api.SeedStatus) string {
	var asked, held []string
	for _, n := range st.Nodes {
		if n.State == api.SeedHeld {
			held = append(held, n.Node)
		} else {
			asked = append(asked, n.Node)
		}
	}
	var parts []string
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("%s hold %s already", slurm.Compress(held), st.Model))
	}
	if len(asked) == 0 {
		parts = append(parts, "nothing to ask")
	} else {
		their := "their"
		if len(asked) == 1 {
			their = "its"
		}
		parts = append(parts, fmt.Sprintf("asking %s in the answers to %s reports until %s", slurm.Compress(asked), their,
			st.Deadline.UTC().Format(time.RFC3339)))
	}
	return api.EscapeControl(fmt.Sprintf("request %s for %s in %s: %s", st.ID, st.Model, st.Fabric, strings.Join(parts, "; ")))
}

// waitSeed polls st until no node is asked any more or wait has passed,
// printing each node's progress as it changes. It returns the last state
// seen, and an error naming the nodes that do not hold the model when the
// wait ends with some still asked, or with some whose ask expired. The
// wait is measured on this machine's clock.
func waitSeed(ctx context.Context, e *env, c *api.Client, st api.SeedStatus, wait time.Duration) (api.SeedStatus, error) {
	start := time.Now()
	until := start.Add(wait)
	fmt.Fprintf(e.stderr, "llmgw seed: waiting up to %s for %s to hold %s\n", wait, slurm.Compress(askedNodes(st)), st.Model)
	said := map[string]string{}
	for {
		cur, err := c.SeedStatus(ctx, st.ID)
		if err != nil {
			return st, err
		}
		st = cur
		for _, n := range st.Nodes {
			if n.State == api.SeedHeld {
				continue
			}
			// The fetch's rate and ETA change at every report; a line per
			// whole percent is progress enough.
			line := table.SeedProgress(n)
			key := line
			if n.Fetch != nil && n.Fetch.Percent >= 0 {
				key = fmt.Sprintf("%s %.0f", n.State, n.Fetch.Percent)
			}
			if said[n.Node] != key {
				said[n.Node] = key
				fmt.Fprintf(e.stderr, "llmgw seed: +%s %s\n", time.Since(start).Round(time.Second), line)
			}
		}
		if !st.Pending() || !time.Now().Before(until) {
			break
		}
		t := time.NewTimer(min(seedPoll, time.Until(until)+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
	var waiting, expired []string
	for _, n := range st.Nodes {
		switch n.State {
		case api.SeedAsked:
			waiting = append(waiting, table.SeedProgress(n))
		case api.SeedExpired:
			expired = append(expired, n.Node)
		}
	}
	switch {
	case len(waiting) > 0:
		return st, fmt.Errorf("after %s, %s not hold %s yet (%s); the coordinator keeps asking until %s, and 'llmgw status %s' shows the fetches",
			wait, plural(len(waiting), "node does", "nodes do"), st.Model, strings.Join(waiting, "; "),
			st.Deadline.UTC().Format(time.RFC3339), st.Model)
	case len(expired) > 0:
		slices.Sort(expired)
		return st, fmt.Errorf("%s did not report holding %s before the request's deadline (%s); their agents' logs say why (\"seed ask failed\")",
			slurm.Compress(expired), st.Model, st.Deadline.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(e.stderr, "llmgw seed: every node asked holds %s (%s)\n", st.Model, time.Since(start).Round(time.Second))
	return st, nil
}

func askedNodes(st api.SeedStatus) []string {
	var out []string
	for _, n := range st.Nodes {
		if n.State == api.SeedAsked {
			out = append(out, n.Node)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
