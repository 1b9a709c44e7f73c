package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/cmd/llmgw/doctor"
	"github.com/llmgw/llmgw/slurm"
)

const doctorAbout = `Checks that this host is set up for llmgw and says, for each problem, how to
fix it: PrologFlags=Alloc; Prolog, Epilog and TaskProlog running llmgw's hooks
(beside the site's own, in the order slurmd runs them: llmgw's last);
PrologEpilogTimeout above the fetch deadline; the SPANK plugin in plugstack.conf;
job_submit/lua; the agent's socket; the coordinator and the agent's token; the
fetch cache (writable, node-local); the Hugging Face cache (hf_cache:
writable, by root alone).

Slurm's settings are read from the running slurmctld (scontrol show config) and
from the slurm.conf this host's slurmd reads (SLURM_CONF, else
/etc/slurm/slurm.conf, else on a configless node slurmd's cached copy in
/run/slurm/conf or /var/spool/slurmd/conf-cache). The SPANK plugin must be
built for the Slurm release scontrol --version names. The rest comes from the agent's configuration (--config,
default /etc/llmgw/agent.toml, and the agent's flags). Run it as root, like the
agent and the hooks.

Exits 1 when something would break jobs or drain the node (error), 0 when
there are only warnings (llmgw works less well, jobs run).`

// fetchDeadline is the longest a Prolog waits for weights on this node:
// agent.toml's fetch_deadline, or its default. PrologEpilogTimeout must stay
// above it, or a slow fetch drains the node.
func fetchDeadline(cfg agent.Config) time.Duration { return cfg.WithDefaults().FetchDeadline }

func doctorCmd(ctx context.Context, e *env, args []string) error {
	var cfg agent.Config
	path, explicit := configPath(args, e.getenv, agent.DefaultConfigFile)
	// A broken agent.toml is a finding, not the end of the checks: the
	// flags and defaults still say where to look for the rest.
	cfgErr := decodeTOML("agent", path, explicit, &cfg)
	if cfgErr != nil {
		cfg = agent.Config{}
	}
	fs := newFlags(e, "doctor", lookup("doctor").synopsis, doctorAbout)
	fs.String("config", path, "the agent's TOML configuration file")
	config.Flags(fs, &cfg)
	jsonOut := fs.Bool("json", false, "print the findings as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Run 'llmgw doctor --help'", "doctor takes no arguments, got %q", fs.Args())
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	config.AbsPaths(fs, &cfg)
	if cfgErr == nil {
		if err := config.Validate(cfg); err != nil {
			cfgErr = fmt.Errorf("config %s: %w", path, err)
		}
	}
	conf := e.getenv("SLURM_CONF")
	fromEnv := conf != ""
	runner := &slurm.Runner{}
	if conf != "" {
		runner.Env = []string{"SLURM_CONF=" + conf}
	} else {
		conf = slurm.DefaultConf
	}
	findings := doctor.Run(ctx, doctor.Options{
		Runner:    runner,
		SlurmConf: conf,
		// Without SLURM_CONF a missing slurm.conf may be a configless node.
		SlurmConfFromEnv: fromEnv,
		AgentConfigErr:   cfgErr,
		Socket:           cfg.Socket,
		CacheDir:         cfg.CacheDir,
		HFCache:          hfCacheOf(cfg),
		Coordinator:      cfg.Coordinator,
		TokenFile:        cfg.TokenFile,
		TLSCA:            cfg.TLSCA,
		FetchDeadline:    fetchDeadline(cfg),
	})
	if *jsonOut {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(findings); err != nil {
			return err
		}
	} else {
		printFindings(e, findings)
	}
	if doctor.Broken(findings) {
		return fmt.Errorf("%d problem(s) would break jobs on this host (error lines above)", count(findings, doctor.Error))
	}
	return nil
}

func count(fs []doctor.Finding, s doctor.Severity) int {
	n := 0
	for _, f := range fs {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// printFindings prints one line per finding, and the fix under each problem.
// A message quoting a command's stderr is kept on its line.
func printFindings(e *env, fs []doctor.Finding) {
	width := 0
	for _, f := range fs {
		width = max(width, len(f.Check))
	}
	oneLine := strings.NewReplacer("\n", " / ")
	for _, f := range fs {
		fmt.Fprintf(e.stdout, "%-5s  %-*s  %s\n", strings.ToUpper(f.Severity.String()), width, f.Check, oneLine.Replace(strings.TrimSpace(f.Message)))
		if f.Fix != "" {
			fmt.Fprintf(e.stdout, "%-5s  %-*s  fix: %s\n", "", width, "", f.Fix)
		}
	}
	fmt.Fprintf(e.stdout, "\n%d error(s), %d warning(s)\n", count(fs, doctor.Error), count(fs, doctor.Warn))
}

// hfCacheOf is the Hugging Face cache cfg fetches Hub models into, or ""
// when cfg names no cache at all.
func hfCacheOf(cfg agent.Config) string {
	if cfg.HFCache == "" && cfg.CacheDir == "" {
		return ""
	}
	return cfg.HFCacheDir()
}
