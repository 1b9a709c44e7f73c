package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/weights/catalog"
)

const warmAbout = `Answers whether a pending job that asked to wait for its weights
(sbatch --llmgw-warm, or llmgw:warm in its comment) may start: its planned
nodes hold its model, it has waited the coordinator's bound
(prefetch_warm_max), or there is nothing to wait for. It prints one line,
"ready: WHY" or "wait: WHY", and exits 0 either way.

burst_buffer.lua (slurm/bb, installed beside slurm.conf with
BurstBufferType=burst_buffer/lua) runs it at every stage-in poll and holds
the job while it says wait. When the coordinator cannot be asked it prints
ready, so that a job is never held on llmgw's account; the reason follows.`

func warmCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "warm", lookup("warm").synopsis, warmAbout)
	url, tokenFile := coordFlags(fs)
	model := fs.String("model", "", "the job's model, when the caller knows it")
	nodes := fs.String("nodes", "", "the job's planned nodes (a hostlist), when the caller knows them")
	asJSON := fs.Bool("json", false, "print the coordinator's answer as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("Try 'llmgw warm 1234'", "warm takes one job id, got %q", fs.Args())
	}
	job := fs.Arg(0)
	if strings.Trim(job, "0123456789") != "" || len(job) > 32 {
		return usagef("Give the job's numeric id, e.g. 1234", "warm: %q is not a Slurm job id", job)
	}
	if *model != "" {
		if err := catalog.ValidModelName(*model); err != nil {
			return usagef("", "--model: %v", err)
		}
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err == nil {
		a, aerr := c.Warm(ctx, job, *model, *nodes)
		if aerr == nil {
			if *asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(a)
			}
			word := "wait"
			if a.Ready {
				word = "ready"
			}
			_, err := fmt.Fprintf(e.stdout, "%s: %s\n", word, a.Why)
			return err
		}
		err = aerr
	}
	// Never hold a job because llmgw cannot answer.
	_, werr := fmt.Fprintf(e.stdout, "ready: the coordinator could not be asked (%v); not holding job %s\n", err, job)
	return werr
}
