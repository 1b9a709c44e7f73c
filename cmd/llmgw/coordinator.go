package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/placement"
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
the coordinator stays ready; status and metrics say why, and it retries.`

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
