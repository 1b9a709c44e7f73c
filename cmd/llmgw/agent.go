package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/weights/fetch"
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
// LLMGW_* environment, flags. It is called again on SIGHUP, so a reload sees
// exactly what a restart would.
func loadAgentConfig(e *env, args []string) (cfg agent.Config, once bool, err error) {
	path, explicit := configPath(args, e.getenv, agent.DefaultConfigFile)
	if err := decodeTOML("agent", path, explicit, &cfg); err != nil {
		return cfg, false, err
	}
	fs := newFlags(e, "agent", lookup("agent").synopsis, agentAbout)
	fs.String("config", path, "TOML configuration file")
	agentConfigFlags(fs, &cfg)
	fs.BoolVar(&once, "once", false, "scan, print the report as JSON, send it if a coordinator is configured, and exit")
	if err := parse(fs, args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, usagef("Weight directories go after --weights-dir", "agent takes no arguments, got %q", fs.Args())
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return cfg, false, err
	}
	absAgentPaths(fs, &cfg)
	cfg.Version = version
	if err := cfg.Validate(); err != nil {
		return cfg, false, fmt.Errorf("config: %w", err)
	}
	return cfg, once, nil
}

// agentConfigFlags defines a flag for every agent.Config setting, its
// default the value already in cfg (from the file). The hooks take the
// agent's configuration too (DESIGN.md §4) and can share these flags.
func agentConfigFlags(fs *pflag.FlagSet, cfg *agent.Config) {
	fs.StringVar(&cfg.Coordinator, "coordinator", cfg.Coordinator, "coordinator base URL, e.g. http://coord:8420 (none: report to nobody)")
	fs.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, "file holding the agent's bearer token")
	fs.StringVar(&cfg.Node, "node", cfg.Node, "this node's Slurm NodeName (default: SLURMD_NODENAME, else slurm.conf's name for this host, else the short hostname)")
	fs.StringVar(&cfg.Fabric, "fabric", orDefault(cfg.Fabric, agent.DefaultFabric), "the fabric (network) this node is on")
	fs.StringSliceVar(&cfg.WeightDirs, "weights-dir", cfg.WeightDirs, "a directory to look for weights in; repeat for several (none: report no weights)")
	fs.StringVar(&cfg.CacheDir, "cache-dir", orDefault(cfg.CacheDir, agent.DefaultCacheDir), "where remote sources are fetched to (always scanned too)")
	fs.StringVar(&cfg.StateDir, "state-dir", orDefault(cfg.StateDir, agent.DefaultStateDir), "where the catalog copy (catalog.json) is kept")
	fs.StringVar(&cfg.RunDir, "run-dir", orDefault(cfg.RunDir, agent.DefaultRunDir), "where the hooks keep a record per job (gc spares what a running job uses)")
	fs.StringVar(&cfg.Socket, "socket", orDefault(cfg.Socket, agent.DefaultSocket), "unix socket the hooks talk to (created mode 0600)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "address to serve Prometheus metrics on, e.g. 127.0.0.1:9482 (none: no metrics)")
	fs.DurationVar(&cfg.ScanInterval, "scan-interval", orDefault(cfg.ScanInterval, agent.DefaultScanInterval), "how often to scan the weight directories")
	fs.DurationVar(&cfg.ReportInterval, "report-interval", orDefault(cfg.ReportInterval, agent.DefaultReportInterval), "how often to report when nothing changed (±10%)")
	fs.DurationVar(&cfg.DirTimeout, "dir-timeout", cfg.DirTimeout, "how long one directory may take to scan before it is reported as not answering (0: the default, 10s)")
	fs.IntVar(&cfg.Connections, "connections", orDefault(cfg.Connections, agent.DefaultConnections), "connections per fetch")
	fs.Var(&bytesFlag{name: "--gpu-memory", v: &cfg.GPUMemory}, "gpu-memory", "the node's total GPU memory, e.g. 640G (default: ask nvidia-smi)")
	fs.StringVar(&cfg.NvidiaSMI, "nvidia-smi", orDefault(cfg.NvidiaSMI, agent.DefaultNvidiaSMI), "nvidia-smi to ask for the GPU memory (absent: unknown)")
	fs.StringVar(&cfg.LockDir, "lock-dir", cfg.LockDir, "node-local directory for the one-fetch-per-node locks (default "+fetch.DefaultLockDir+")")
}

// bytesFlag is a byte count flag that takes units (see parseBytes).
type bytesFlag struct {
	name string
	v    *int64
}

func (f *bytesFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f *bytesFlag) Set(s string) error {
	n, err := parseBytes(f.name, s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

func (f *bytesFlag) Type() string { return "BYTES" }

// absAgentPaths makes the paths given by flag or environment absolute. A
// relative path there means the directory it was typed in; in the file it
// means nothing, and Validate says so.
func absAgentPaths(fs *pflag.FlagSet, cfg *agent.Config) {
	for name, p := range map[string]*string{"token-file": &cfg.TokenFile, "cache-dir": &cfg.CacheDir, "state-dir": &cfg.StateDir, "run-dir": &cfg.RunDir, "socket": &cfg.Socket, "nvidia-smi": &cfg.NvidiaSMI, "lock-dir": &cfg.LockDir} {
		if fs.Changed(name) && *p != "" {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	if fs.Changed("weights-dir") {
		for i, d := range cfg.WeightDirs {
			if abs, err := filepath.Abs(d); err == nil && d != "" {
				cfg.WeightDirs[i] = abs
			}
		}
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
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
			}
		}
	}()
	return a.Run(ctx)
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
		return fmt.Errorf("report not sent: %w", err)
	case sent:
		fmt.Fprintf(e.stderr, "llmgw agent: report %d sent to %s\n", r.Seq, coord)
	default:
		fmt.Fprintln(e.stderr, "llmgw agent: report not sent: no coordinator configured (pass --coordinator URL or set LLMGW_COORDINATOR)")
	}
	return nil
}
