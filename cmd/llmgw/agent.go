package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/agent/nodeconf"
)

const agentAbout = `Runs the node agent: scans the weight directories and the fetch cache,
reports what this node holds to the coordinator, keeps a copy of the catalog
for the hooks, and serves the hooks on a unix socket (ensure a source, with one
fetch per source for the whole node; status).

Settings come from the TOML file (--config, default /etc/llmgw/agent.toml; keys
are the flag names with '_' for '-', weight_dirs for --weights-dir), then
LLMGW_* environment variables (LLMGW_CACHE_DIR for --cache-dir), then flags.
SIGHUP re-reads all three. With --once the agent scans, prints the report it
would send as JSON, sends it when a coordinator is configured, and exits.`

// loadAgentConfig layers the agent's configuration: defaults, the file,
// LLMGW_* environment, flags (config.Load, which the hooks use too). It is
// called again on SIGHUP, so a reload sees exactly what a restart would.
func loadAgentConfig(e *env, args []string) (cfg agent.Config, once bool, err error) {
	fs := newFlags(e, "agent", lookup("agent").synopsis, agentAbout)
	fs.BoolVar(&once, "once", false, "scan, print the report as JSON, send it if a coordinator is configured, and exit")
	cfg, err = loadNodeConfig(fs, "agent", args, e.getenv)
	if err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, usagef("Weight directories go after --weights-dir", "agent takes no arguments, got %q", fs.Args())
	}
	cfg.Version = version
	return cfg, once, nil
}

// loadNodeConfig is config.Load with its command-line mistakes made usage
// errors, for the agent and the hooks.
func loadNodeConfig(fs *pflag.FlagSet, cmd string, args []string, getenv func(string) string) (config.Agent, error) {
	cfg, err := config.Load(fs, cmd, args, getenv)
	var ae *config.ArgError
	if errors.As(err, &ae) {
		return cfg, usagef("Run '"+fs.Name()+" --help' for its flags", "%v", ae.Err)
	}
	return cfg, err
}

// agentCmd wires flags, environment and file into agent.Config and runs the
// agent until ctx ends (SIGTERM), re-reading its configuration on SIGHUP.
func agentCmd(ctx context.Context, e *env, args []string) error {
	cfg, once, err := loadAgentConfig(e, args)
	if err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(e.stderr)
	log.SetFormatter(&logrus.JSONFormatter{})
	if once {
		// The report and one line about its fate say it all; warnings
		// would repeat what the report's dirs and errors already show.
		log.SetLevel(logrus.ErrorLevel)
	}
	a, err := agent.New(cfg, log)
	if err != nil {
		return err
	}
	if once {
		return agentOnce(ctx, e, a)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	path, _ := config.Path(args, e.getenv, config.DefaultFile)
	hooksCopy(log, path)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				nc, _, err := loadAgentConfig(e, args)
				if err == nil {
					err = a.Reload(nc)
				}
				if err != nil {
					log.WithError(err).Error("SIGHUP: configuration not reloaded; keeping the one in force")
				}
				hooksCopy(log, path)
			}
		}
	}()
	return a.Run(ctx)
}

// hooksCopy leaves the hooks' resolved copy of the configuration file
// path (leaveResolved), saying so when it cannot: then a node's first job
// after a change takes the slow path, which writes the copy.
func hooksCopy(log logrus.FieldLogger, path string) {
	err := leaveResolved(path)
	switch {
	case err == nil:
		log.WithField("copy", nodeconf.ResolvedPath(path)).Debug("left the hooks' resolved copy of the configuration")
	case errors.Is(err, fs.ErrNotExist):
		// No file: the hooks run on the defaults, and read no copy.
	default:
		log.WithError(err).WithField("copy", nodeconf.ResolvedPath(path)).Warn("the hooks' resolved copy of the configuration was not written; until a job's slow path writes it, jobs take the slow path (the unit must let the agent write beside its configuration: ReadWritePaths)")
	}
}

// agentOnce prints one report and says on stderr whether it was delivered.
// Failing to deliver to a configured coordinator is exit 1: a script
// checking a node's setup must see that.
func agentOnce(ctx context.Context, e *env, a *agent.Agent) error {
	r, sent, err := a.Once(ctx)
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if jerr := enc.Encode(r); jerr != nil {
		return jerr
	}
	coord := a.Config().Coordinator
	switch {
	case err != nil:
		return fmt.Errorf("report not sent: %w; %s", err, a.WhyNotSent(err))
	case sent:
		fmt.Fprintf(e.stderr, "llmgw agent: report %d sent to %s\n", r.Seq, coord)
	default:
		fmt.Fprintln(e.stderr, "llmgw agent: report not sent: no coordinator configured (pass --coordinator URL or set LLMGW_COORDINATOR)")
	}
	return nil
}
