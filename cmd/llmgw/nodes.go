package main

import (
	"context"
	"fmt"
	"os"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
)

const nodesAbout = `Manage the nodes the coordinator knows.

token NODE makes NODE's own token, for sites without munge, and revokes the
one it had: the agent of NODE, and only it, reports with it. --out FILE
writes it to FILE (mode 0600), to be installed on NODE as agent.toml's
token_file like a host key; else it is printed. It is shown only this once.

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
	out := fs.String("out", "", "token: write the token to this file (mode 0600) instead of printing it")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("Try 'llmgw nodes rm NODE'", "nodes needs a subcommand: token or rm")
	}
	if rest[0] != "token" && *out != "" {
		return usagef("Use it with 'llmgw nodes token'", "--out applies only to token")
	}
	sub, rest := rest[0], rest[1:]
	if sub != "token" && sub != "rm" {
		return usagef("Use token or rm", "unknown nodes subcommand %q", sub)
	}
	if len(rest) != 1 {
		return usagef("Try 'llmgw nodes "+sub+" n17'", "nodes %s takes one NODE, got %d arguments", sub, len(rest))
	}
	node := rest[0]
	if err := api.ValidNodeName(node); err != nil {
		return usagef("", "%v", err)
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	if sub == "rm" {
		if err := c.DeleteNode(ctx, node); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed node %s\n", node)
		return nil
	}
	made, err := c.NewNodeToken(ctx, node)
	if err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintln(e.stdout, made.Token)
		return nil
	}
	if err := catalog.WriteAtomic(*out, []byte(made.Token+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the token of node %s: %w; its old token is revoked, so run this again", made.Node, err)
	}
	fmt.Fprintf(e.stdout, "wrote the token of node %s to %s (mode 0600); install it on %s as agent.toml's token_file\n", made.Node, *out, made.Node)
	return nil
}
