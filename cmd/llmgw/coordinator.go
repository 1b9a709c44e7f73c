package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/prefetch"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/weights/catalog"
)

const defaultCoordinatorConfig = "/etc/llmgw/coordinator.toml"

const coordinatorAbout = `Runs the coordinator: keeps the model catalog, takes the agents' reports,
and answers, per fabric, which models each fabric can serve (GET /v1/status).

Settings come from the TOML file (--config, default /etc/llmgw/coordinator.toml;
keys are the flag names with '_' for '-'; unknown keys are an error), then
LLMGW_* environment variables (LLMGW_DB for --db), then flags.

Tokens: without munge, each agent posts reports with its node's own token
('llmgw nodes token NODE'), which speaks for that node alone; catalog changes
need the admin token, which may also post reports. A write the server has no
token for is refused with 403 (there is no unauthenticated write mode). Reads
(status, catalog) are open unless --read-token-file is set; then they need the
read token, a node's token or the admin token. /healthz, /readyz and /metrics
are always open. The one agent token every node shared (agent_token_file) is
gone: a setting that still names it is refused.

MUNGE (munge_socket in the file): every request then carries a credential from
its host's munged. Reports are taken only for nodes in Slurm's node list, from
root (or agent_user) on one of the node's addresses; catalog changes, features,
gc and 'llmgw nodes rm' need root, SlurmUser, admin_users or admin_groups;
reads need a credential from any user. Without munge, 'llmgw nodes token NODE'
gives each node a token that speaks for it alone.

With --features (features = true) it also keeps Slurm node features in step:
llmgw.MODEL on every node that can serve MODEL without fetching (a stale node
loses them; the site's own features are kept), rewritten on every change and
every --feature-interval, since scontrol reconfigure and a slurmctld restart
wipe them, and published to --feature-file for job_submit.lua. It must then
run where scontrol update is allowed (SlurmUser or root). If scontrol fails,
the coordinator stays ready; status and metrics say why, and it retries.

With --features it also prefetches (--prefetch=false, prefetch = false turns
it off): once per backfill interval (bf_interval, read from slurmctld) one
squeue reads the pending jobs' plans; a job that names a model (its comment's
llmgw:model=M, or job_submit's note for --llmgw-model) and whose plan is the
same in two reads in a row gets its planned nodes asked to fetch the model,
within --prefetch-horizon of its expected start and --prefetch-max-bytes per
node. Nodes fetch it below any job's fetch and never evict for it; a plan that
moves cancels the ask. 'llmgw status' shows the prefetches.`

// coordinatorCmd wires flags, environment and file into coordinator.Config
// and runs the coordinator until ctx ends (SIGTERM).
func coordinatorCmd(ctx context.Context, e *env, args []string) error {
	var cfg coordinator.Config
	path, explicit := configPath(args, e.getenv, defaultCoordinatorConfig)
	if err := decodeTOML("coordinator", path, explicit, &cfg); err != nil {
		return err
	}
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	fs := newFlags(e, "coordinator", lookup("coordinator").synopsis, coordinatorAbout)
	fs.String("config", path, "TOML configuration file")
	fs.StringVar(&cfg.Listen, "listen", def(cfg.Listen, coordinator.DefaultListen), "address to serve the API on (loopback by default; set it to serve the cluster)")
	fs.StringVar(&cfg.DB, "db", def(cfg.DB, coordinator.DefaultDB), "sqlite database file (created if missing)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate to serve HTTPS with (with --tls-key)")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key of --tls-cert (mode 0600)")
	fs.BoolVar(&cfg.InsecureHTTP, "insecure-http", cfg.InsecureHTTP, "allow plain HTTP on an address other than loopback")
	// Kept, hidden, so that the flag and LLMGW_AGENT_TOKEN_FILE are refused
	// by name like the file's key (coordinator.Config.AgentTokenFile).
	fs.StringVar(&cfg.AgentTokenFile, "agent-token-file", cfg.AgentTokenFile, "removed: give each node its own token (llmgw nodes token NODE)")
	fs.MarkHidden("agent-token-file")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", cfg.AdminTokenFile, "file holding the token for catalog changes")
	fs.StringVar(&cfg.ReadTokenFile, "read-token-file", cfg.ReadTokenFile, "file holding a token reads must carry (none: reads are open)")
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = coordinator.DefaultReportInterval
	}
	if cfg.StallAfter == 0 {
		cfg.StallAfter = coordinator.DefaultStallAfter
	}
	fs.DurationVar(&cfg.ReportInterval, "report-interval", cfg.ReportInterval, fmt.Sprintf("how often agents report; a node is stale after %d missed", coordinator.StaleIntervals))
	fs.DurationVar(&cfg.StallAfter, "stall-after", cfg.StallAfter, "how long a fetch may make no progress before status calls it stalled")
	if cfg.FeatureInterval == 0 {
		cfg.FeatureInterval = coordinator.DefaultFeatureInterval
	}
	fs.BoolVar(&cfg.Features, "features", cfg.Features, "keep Slurm node features "+placement.FeaturePrefix+"MODEL in step with presence (needs scontrol update rights)")
	fs.DurationVar(&cfg.FeatureInterval, "feature-interval", cfg.FeatureInterval, "how often to rewrite features when nothing changed (they are wiped by scontrol reconfigure)")
	fs.StringVar(&cfg.FeatureFile, "feature-file", def(cfg.FeatureFile, coordinator.DefaultFeatureFile), "file publishing each node's partitions and features, for job_submit.lua")
	if cfg.FeatureListingMaxMB == 0 {
		cfg.FeatureListingMaxMB = coordinator.DefaultFeatureListingMaxMB
	}
	fs.Int64Var(&cfg.FeatureListingMaxMB, "feature-listing-max-mb", cfg.FeatureListingMaxMB, "MB llmgw's features may add to a node listing (sinfo); past it the least-held models get none")
	prefetchOn := cfg.Prefetch == nil || *cfg.Prefetch
	fs.BoolVar(&prefetchOn, "prefetch", prefetchOn, "with --features, ask the nodes backfill plans for a pending job to fetch its model ahead of the start (--prefetch=false: off)")
	if cfg.PrefetchHorizon == 0 {
		cfg.PrefetchHorizon = prefetch.DefaultHorizon
	}
	fs.DurationVar(&cfg.PrefetchHorizon, "prefetch-horizon", cfg.PrefetchHorizon, "how far ahead of a job's expected start its nodes are asked to fetch")
	fs.DurationVar(&cfg.PrefetchInterval, "prefetch-interval", cfg.PrefetchInterval, "read the plans this often instead of once per bf_interval (tests)")
	fs.MarkHidden("prefetch-interval")
	if cfg.PrefetchWarmMax == 0 {
		cfg.PrefetchWarmMax = prefetch.DefaultWarmMax
	}
	fs.DurationVar(&cfg.PrefetchWarmMax, "prefetch-warm-max", cfg.PrefetchWarmMax, "the longest a job that asked to wait for its weights (--llmgw-warm) is held; keep it below burst_buffer.conf's StageInTimeout")
	maxBytes := ""
	if cfg.PrefetchMaxBytes != 0 {
		maxBytes = fmt.Sprint(cfg.PrefetchMaxBytes)
	}
	fs.StringVar(&maxBytes, "prefetch-max-bytes", maxBytes, fmt.Sprintf("bytes one node is asked to prefetch at once, e.g. 200G (default %s; -1: no bound)", catalog.FormatBytes(prefetch.DefaultMaxBytes)))
	fs.StringVar(&cfg.Scontrol, "scontrol", def(cfg.Scontrol, coordinator.DefaultScontrol), "absolute path of scontrol")
	fs.StringVar(&cfg.Sinfo, "sinfo", def(cfg.Sinfo, coordinator.DefaultSinfo), "absolute path of sinfo")
	fs.StringVar(&cfg.SlurmConf, "slurm-conf", cfg.SlurmConf, "SLURM_CONF for scontrol and sinfo (default: inherited)")
	level := fs.String("log-level", "info", "log level: debug (one line per report), info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("Run 'llmgw coordinator --help'", "coordinator takes no arguments, got %q", fs.Args())
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	cfg.Prefetch = &prefetchOn
	if maxBytes != "" && maxBytes != "-1" {
		n, err := catalog.ParseBytes(maxBytes)
		if err != nil || n <= 0 {
			return usagef("Give a size such as 200G, or -1 for no bound", "--prefetch-max-bytes %q is not a size", maxBytes)
		}
		cfg.PrefetchMaxBytes = n
	} else if maxBytes == "-1" {
		cfg.PrefetchMaxBytes = -1
	}
	if cfg.PrefetchHorizon <= 0 {
		return usagef("Give a duration such as 30m", "--prefetch-horizon %s: it must be positive", cfg.PrefetchHorizon)
	}
	lvl, err := logrus.ParseLevel(*level)
	if err != nil {
		return usagef("Use debug, info, warn or error", "--log-level %q: %v", *level, err)
	}
	// Paths typed on the command line mean the directory they were typed in.
	for _, name := range []string{"db", "tls-cert", "tls-key", "agent-token-file", "admin-token-file", "read-token-file", "feature-file", "slurm-conf"} {
		if f := fs.Lookup(name); f.Changed && f.Value.String() != "" {
			if abs, err := filepath.Abs(f.Value.String()); err == nil {
				fs.Set(name, abs)
			}
		}
	}
	for _, name := range []string{"scontrol", "sinfo"} {
		if p := fs.Lookup(name).Value.String(); !filepath.IsAbs(p) {
			return usagef("Give the absolute path, e.g. /usr/bin/"+name, "--%s %q is not an absolute path; Slurm commands are run by path, not looked up", name, p)
		}
	}
	log := logrus.New()
	log.SetOutput(e.stderr)
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetLevel(lvl)
	return coordinator.Run(ctx, cfg, log)
}
