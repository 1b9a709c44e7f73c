// The llmgw command runs every part of llmgw: the node agent, the
// coordinator, the Slurm hooks and the operator's command line.
//
// This package only wires: it parses flags and configuration into a
// package's Config and calls it. Anything that decides something lives in a
// package of its own, where it can be tested without a process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time: -ldflags "-X main.version=$(git describe)".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
	})
	stop()
	os.Exit(code)
}
