package main

import (
	"context"
	"fmt"
	"os"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/munge"
)

const nodesAbout = `Manage the nodes the coordinator knows.

rm NODE forgets a node: its presence, fetches and place in status. A node
that still runs an agent comes back with its next report. With munge the
coordinator forgets by itself the nodes that left Slurm's node list and were
silent for forget_after; rm is for the rest. Needs an admin (see models).`

// mungeSocket is the munged a command authenticates through when it has no
// token file: LLMGW_MUNGE_SOCKET, else munged's default socket when it is
// there.
func mungeSocket(getenv func(string) string) string {
	if s := getenv("LLMGW_MUNGE_SOCKET"); s != "" {
		return s
	}
	if _, err := os.Stat(munge.DefaultSocket); err == nil {
		return munge.DefaultSocket
	}
	return ""
}

func nodesCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "nodes", lookup("nodes").synopsis, nodesAbout)
	url, tokenFile := coordFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("Try 'llmgw nodes rm NODE'", "nodes needs a subcommand: rm")
	}
	switch sub, rest := rest[0], rest[1:]; sub {
	case "rm":
		if len(rest) != 1 {
			return usagef("Try 'llmgw nodes rm n17'", "nodes rm takes one NODE, got %d arguments", len(rest))
		}
		if err := api.ValidNodeName(rest[0]); err != nil {
			return usagef("", "%v", err)
		}
		c, err := coordClient(*url, *tokenFile)
		if err != nil {
			return err
		}
		if err := c.DeleteNode(ctx, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed node %s\n", rest[0])
		return nil
	default:
		return usagef("Use rm", "unknown nodes subcommand %q", sub)
	}
}
