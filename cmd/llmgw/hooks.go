package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/prolog/full"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/fetch"
)

const hooksAbout = `A Slurm hook, normally started by llmgw-hook (which slurmd runs as the
Prolog, TaskProlog and Epilog) when its fast path cannot settle the job. The
job comes from the environment slurmd gives the hook (SLURM_JOB_ID,
SLURMD_NODENAME, SPANK_LLMGW_MODEL or an llmgw:model=M tag in
SLURM_JOB_COMMENT). Settings are the agent's: --config (default
/etc/llmgw/agent.toml) and the agent's flags.

prolog resolves the model (coordinator, else the node's catalog copy), makes
its weights present (through the agent, else in this process) within
--fetch-deadline, and records the outcome for the TaskProlog; on failure it
also sets the job's AdminComment. task-prolog prints the job's
LLMGW_MODEL/LLMGW_MODEL_PATH exports, or fails the job with the reason.
epilog clears the job's record and runs node gc at most once per
--gc-interval. prolog and epilog exit 0 whatever happens: a failing Prolog
or Epilog would drain the node.`

// hookConfig reads the agent's configuration for a hook (a hook takes no
// arguments of its own). When it came from the file alone (no flags, no
// LLMGW_* settings), it leaves the resolved copy the hook binary reads
// instead of parsing TOML on every job start. Writing it may fail (the
// TaskProlog runs as the job's user, who may not write beside agent.toml);
// the next Prolog or Epilog, run as root, writes it.
func hookConfig(e *env, name string, args []string) (config.Agent, error) {
	path, _ := config.Path(args, e.getenv, config.DefaultFile)
	id, idErr := nodeconf.StatFile(path)
	fs := newFlags(e, name, "[--config FILE] [agent flags]", hooksAbout)
	cfg, err := loadNodeConfig(fs, name, args, e.getenv)
	if err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, usagef("", "%s takes no arguments, got %q", name, fs.Args())
	}
	cfg = cfg.WithDefaults()
	plain := true
	fs.Visit(func(f *pflag.Flag) { plain = plain && f.Name == "config" })
	if plain && idErr == nil {
		nodeconf.WriteResolved(path, id, version, cfg)
	}
	return cfg, nil
}

// leaveResolved writes the resolved copy of the configuration file path
// that llmgw-hook's fast path reads (nodeconf.WriteResolved): the file as
// a hook run by slurmd loads it (no flags, no LLMGW_* settings), defaults
// applied, exactly what hookConfig leaves. The agent calls it when it
// starts and when SIGHUP reloads it, so the first job on a node takes the
// fast path when its weights are there: before, only a slow-path hook
// wrote the copy, and that first job went the slow way whatever the cache
// held. A file that does not exist needs no copy (the hooks then run on
// the defaults); one that changes while it is read leaves none.
func leaveResolved(path string) error {
	id, err := nodeconf.StatFile(path)
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("prolog", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, "prolog", []string{"--config", path}, func(string) string { return "" })
	if err != nil {
		return err
	}
	return nodeconf.WriteResolved(path, id, version, cfg.WithDefaults())
}

// neverDrain logs a hook's own error and returns nil, so the Prolog and the
// Epilog exit 0 (see package prolog); --help is still --help.
func neverDrain(e *env, name string, err error) error {
	if err == nil || err == pflag.ErrHelp {
		return err
	}
	fmt.Fprintf(e.stderr, "llmgw %s: job %s: %v\n", name, e.getenv("SLURM_JOB_ID"), err)
	return nil
}

func prologCmd(ctx context.Context, e *env, args []string) error {
	cfg, err := hookConfig(e, "prolog", args)
	if err != nil {
		return neverDrain(e, "prolog", err)
	}
	job, jobErr := prolog.JobFromEnv(e.getenv)
	p := &full.Prolog{
		Config: cfg,
		Agent:  &api.LocalClient{Socket: cfg.Socket},
		Fetcher: &fetch.Fetcher{
			CacheDir:     cfg.CacheDir,
			LockDir:      cfg.LockDir(),
			Connections:  cfg.Connections,
			HFTokenFile:  cfg.HFTokenFile,
			HFEndpoint:   cfg.HFEndpoint,
			CacheReserve: cfg.CacheReserve,
			MinSpeed:     cfg.FetchMinSpeed,
			Log:          hookLogger(e),
		},
		Slurm: &slurm.Runner{},
		Log:   e.stderr,
	}
	if cfg.Coordinator != "" {
		p.Coordinator = &api.Client{BaseURL: cfg.Coordinator, TLSCA: cfg.TLSCA, UserAgent: "llmgw-prolog/" + version}
		if cfg.MungeSocket != "" {
			// As the agent reports: a coordinator with munge wants a
			// credential for every read.
			p.Coordinator.Auth = munge.Authenticator{Codec: munge.New(cfg.MungeSocket)}
		} else if cfg.TokenFile != "" {
			// The agent's token reads the catalog; without it, a coordinator
			// that requires one for reads is down as far as this job is
			// concerned, and the catalog copy answers.
			if tok, err := api.ReadToken(cfg.TokenFile); err == nil {
				p.Coordinator.Token = tok
			} else {
				fmt.Fprintf(e.stderr, "llmgw prolog: job %s: %v\n", job.ID, err)
			}
		}
	}
	p.Run(ctx, job, jobErr)
	return nil
}

func taskPrologCmd(_ context.Context, e *env, args []string) error {
	cfg, err := hookConfig(e, "task-prolog", args)
	if err == pflag.ErrHelp {
		return err
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "llmgw task-prolog: job %s: %v\n", e.getenv("SLURM_JOB_ID"), err)
		// Without its configuration the TaskProlog cannot find the record: a
		// job whose environment names a model fails with the reason, others
		// run (a broken agent.toml must not fail every job).
		return prolog.ConfigFailed(e.getenv("SLURM_JOB_ID"), err, e.getenv, e.stdout)
	}
	return prolog.TaskProlog(cfg.RunDir, e.getenv("SLURM_JOB_ID"), e.getenv, e.stdout)
}

func epilogCmd(ctx context.Context, e *env, args []string) error {
	cfg, err := hookConfig(e, "epilog", args)
	if err != nil {
		return neverDrain(e, "epilog", err)
	}
	(&full.Epilog{Config: cfg, GC: full.NodeGC(e.stderr), Log: e.stderr}).Run(ctx, e.getenv("SLURM_JOB_ID"))
	return nil
}

// hookLogger is the fetcher's log in a hook: text lines on stderr, which
// slurmd copies into its log.
func hookLogger(e *env) logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(e.stderr)
	l.SetFormatter(&logrus.TextFormatter{DisableColors: true, DisableTimestamp: true})
	return l.WithField("job", e.getenv("SLURM_JOB_ID"))
}
