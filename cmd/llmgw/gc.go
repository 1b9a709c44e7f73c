package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
)

const gcAbout = `Asks every node (or one, with --node) to reclaim its fetch cache, through
the coordinator: each agent gets the request with its next report, decides
on its own disk, and answers. Waits up to two report intervals for the
answers and prints, per node, what it was asked to remove, what it removed
(or, without --collect, would remove), what it kept or refused and why, and
names the nodes that did not answer. It also shows what each node's
eviction did lately (evicted) and, when a cache is above cache_high, what
eviction would remove now and what it keeps.

A node removes only files directly inside its cache directory whose name is
a cache name (what llmgw fetched) that no catalog entry wants, and the
.part files of fetches left behind (of a source no entry wants, or untouched
for gc_part_max_age, inside a set directory too). The guards, and what
lifts each:

  never lifted, --force or not:
    a symlink, a name outside the cache or not a cache name, a fetch in
    progress, weights a running job's record names;
    a file fetched within gc_interval (a Prolog may have fetched it against
    a newer catalog than the node's copy): listed as kept with the time
    after which it can go.
  lifted by --trust (and by --force):
    the catalog is not the one the node trusts: another coordinator
    database (its identity changed), or one that does not descend from the
    catalog the node last collected against (a database restored from a
    backup). --trust records that an admin adopted the current catalog:
    every node trusts it from its next catalog read, a node down now too.
  lifted by --force only:
    gc_max_share (agent.toml, default 50%): a run that would remove more of
    the cache removes nothing. Names an admin's own models add or models rm
    dropped do not count against it.
  held whatever the flags:
    a catalog copy that cannot be read, or reads as empty while the node
    holds fetched weights; a job record that cannot be read.

A node checks every name it is asked again itself, so "asked to remove" is
only the coordinator's view. 'llmgw status' says how many nodes hold gc and
why.

The old revisions of Hub models (hf:ORG/REPO) are not this command's: each
node's Epilog, every gc_interval, removes from its Hugging Face cache
(hf_cache) a snapshot of a commit the catalog has moved on from once no job
on the node uses it, then the blobs and refs only it had, and what stopped
Hub fetches left in the cache's staging directory; never on an hf_cache on
another filesystem than the cache (a shared one on a filer, which other
nodes' jobs read: its admin removes old revisions there).

Listing is the default; --collect removes. Needs the admin token. --json
prints the coordinator's record of the request (GET /v1/gc/ID) after the
wait; its fields are stable.`

// gcGrace is how long past the request's deadline the command still waits:
// an agent handed the request just before it posts its answer right after.
const gcGrace = 5 * time.Second

func gcCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "gc", lookup("gc").synopsis, gcAbout)
	url, tokenFile := coordFlags(fs)
	collect := fs.Bool("collect", false, "remove what the nodes agree is garbage (default: only list it)")
	node := fs.String("node", "", "ask only this node")
	force := fs.Bool("force", false, "with --collect: collect against a catalog a node does not trust, and beyond gc_max_share")
	trust := fs.Bool("trust", false, "adopt the current catalog as the one every node trusts (a node down now adopts it later); gc_max_share still holds")
	asJSON := fs.Bool("json", false, "print the coordinator's record of the request as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Name one node with --node NAME", "gc takes no arguments, got %q", fs.Args())
	}
	if *force && !*collect {
		return usagef("Give --collect --force together", "--force without --collect: a listing removes nothing, so there is nothing to force")
	}
	if *node != "" {
		if err := api.ValidNodeName(*node); err != nil {
			return usagef("'llmgw status' lists the nodes", "--node: %v", err)
		}
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	st, err := c.StartGC(ctx, api.GCRequest{Collect: *collect, Node: *node, Force: *force, Trust: *trust})
	if err != nil {
		return err
	}
	if len(st.Nodes) > 0 {
		fmt.Fprintf(e.stderr, "llmgw gc: request %s handed to %d nodes with their next reports; waiting up to %s for answers\n",
			st.ID, len(st.Nodes), st.Deadline.Sub(st.Created).Round(time.Second))
		if st, err = c.WaitGC(ctx, st, 500*time.Millisecond, gcGrace); err != nil {
			return err
		}
	}
	if !*asJSON {
		return table.WriteGC(e.stdout, st)
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}
