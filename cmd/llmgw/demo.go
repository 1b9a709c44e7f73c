package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/llmgw/llmgw/cmd/llmgw/demo"
)

func demoCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", lookup("demo").synopsis, demo.About)
	parent := fs.String("tmp", os.TempDir(), "directory to create the demo's temporary directory in")
	noFUSE := fs.Bool("no-fuse", false, "simulate the shared filer with a plain directory even where FUSE is possible")
	noCluster := fs.Bool("no-cluster", false, "leave the dev cluster alone even when it is up (skips the last step)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Run 'llmgw demo'", "demo takes no arguments, got %q", fs.Args())
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this llmgw binary to run its coordinator and agents: %w", err)
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return fmt.Errorf("finding this llmgw binary: %w", err)
	}
	return demo.Run(ctx, demo.Options{Stdout: e.stdout, Terminal: e.isTerminal(e.stdout), Getenv: e.getenv,
		Bin: bin, Parent: *parent, Version: version, NoFUSE: *noFUSE, NoCluster: *noCluster})
}
