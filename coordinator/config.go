// Package coordinator is the one place that knows the model catalog and what
// every node holds: an HTTP service over the store, the per-fabric status
// computed from the nodes' reports, and its metrics.
//
// Its state is soft except the catalog. Agents report their whole state
// every interval, so after any restart node presence is whole again within
// one interval; the database keeps it meanwhile so that status is useful at
// once. Fabrics are not connected to one another, so every answer is per
// fabric: "can this fabric serve the model", where one shared filer counts
// the same as twenty local copies and status says which it is.
package coordinator

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
)

// Default coordinator settings.
const (
	DefaultListen         = "127.0.0.1:8420"
	DefaultDB             = "/var/lib/llmgw/coordinator.db"
	DefaultReportInterval = 30 * time.Second
	DefaultStallAfter     = 60 * time.Second
	// StaleIntervals is how many report intervals a node may miss before it
	// is stale; the presence model owns the rule (placement.StaleIntervals).
	StaleIntervals = placement.StaleIntervals
)

// Config is the coordinator's configuration. The TOML keys are the flag
// names with '-' as '_' (unknown keys are an error).
type Config struct {
	// Listen is the address to serve on (default DefaultListen, loopback
	// only: serving the cluster is a decision made by setting it).
	Listen string `toml:"listen"`
	// DB is the sqlite database file (default DefaultDB).
	DB string `toml:"db"`

	// TLSCert and TLSKey, both or neither, make the coordinator serve
	// HTTPS: its answers tell root on every node what to fetch and jobs
	// what to load, and over plain HTTP anyone on the path can rewrite them
	// and read every token. Agents and clients verify it with tls_ca. The
	// key file must be readable by its owner only.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// InsecureHTTP allows serving plain HTTP on an address other than
	// loopback. Without it such a listen address and no TLS is refused at
	// start; `llmgw doctor` reports it as an error either way.
	InsecureHTTP bool `toml:"insecure_http"`

	// AgentTokenFile was the one token every agent reported with; it let
	// any node speak for every other. It is kept only so that a config
	// still setting it is refused by name (Config.checkRemoved) instead of
	// starting with agents that can no longer report.
	AgentTokenFile string `toml:"agent_token_file"`
	// AdminTokenFile holds the token for catalog writes and for making
	// nodes' tokens (llmgw nodes token NODE). The admin token also may post
	// reports without munge (it can already change what they mean). Without
	// it catalog writes are refused with 403.
	AdminTokenFile string `toml:"admin_token_file"`
	// ReadTokenFile, when set, makes every read (status and catalog) need a
	// token: this one, a node's token or the admin token, so operators hand users a
	// token that can read and nothing else. Unset, reads are open, since
	// status tells nothing a cluster user cannot see from sinfo's features.
	// /healthz, /readyz and /metrics are always open (probes and scrapers),
	// and carry no node names or paths.
	ReadTokenFile string `toml:"read_token_file"`

	// ReportInterval is how often agents report (default
	// DefaultReportInterval). A node is stale after StaleIntervals of them
	// without a report.
	ReportInterval time.Duration `toml:"report_interval"`
	// StallAfter is how long a fetch may go without progress before status
	// calls it stalled rather than slow (default DefaultStallAfter).
	StallAfter time.Duration `toml:"stall_after"`

	// MaxBatch bounds how many reports share one database transaction
	// (default DefaultMaxBatch). MaxBatchWait is how long the writer waits
	// for a batch to fill (default DefaultMaxBatchWait, at most 1 s; negative: commit
	// whatever is queued at once). A report is answered only after its
	// batch commits.
	MaxBatch     int           `toml:"max_batch"`
	MaxBatchWait time.Duration `toml:"max_batch_wait"`

	// Features turns on the feature reconciler: the coordinator keeps the
	// Slurm node feature placement.FeaturePrefix+MODEL on every node that can serve
	// MODEL without fetching, with `scontrol update`. Off by default: it
	// needs to run where scontrol update is allowed (SlurmUser or root, with
	// the cluster's slurm.conf).
	Features bool `toml:"features"`
	// FeatureInterval is how often the reconciler rewrites features even
	// when nothing changed (default DefaultFeatureInterval): `scontrol
	// reconfigure` and a slurmctld restart wipe them, and they come back
	// at the next sync: within one interval, plus one retry when that sync
	// meets 24.11's restart of slurmctld (docs/slurm/behaviour.md).
	FeatureInterval time.Duration `toml:"feature_interval"`
	// FeatureFile is where the reconciler publishes each node's partitions
	// and current features (the site's and llmgw's) for job_submit.lua (default
	// DefaultFeatureFile); slurmctld's user must be able to read it.
	FeatureFile string `toml:"feature_file"`
	// FeatureSetsMax is read and ignored, with a warning: it bounded the
	// distinct feature sets, each a node config record, by withholding
	// models' features. Presence is ActiveFeatures now, which adds no
	// record, so nothing is withheld (docs/slurm/behaviour.md §11).
	FeatureSetsMax int `toml:"feature_sets_max"`
	// FeatureListingMaxMB bounds, in MB, what llmgw's AvailableFeatures add
	// to a node listing (every sinfo and scontrol show node, and
	// slurmctld's saved node state): each config record offers the models
	// its nodes hold (or held within the last hour), once per node of it.
	// Past the bound the least-held models get no feature and their jobs
	// no preference. Default DefaultFeatureListingMaxMB, a quarter of
	// Slurm's 1 GiB message limit, which withholds nothing on any cluster
	// of today; a site whose users feel sinfo slow trades preferences for
	// a smaller listing here (docs/design.md §3).
	FeatureListingMaxMB int64 `toml:"feature_listing_max_mb"`
	// Scontrol and Sinfo are the absolute paths of Slurm's commands
	// (default /usr/bin/scontrol, /usr/bin/sinfo).
	Scontrol string `toml:"scontrol"`
	Sinfo    string `toml:"sinfo"`
	// SlurmConf, when set, is passed to scontrol and sinfo as SLURM_CONF;
	// unset, they inherit the coordinator's environment (and without
	// SLURM_CONF there, read /etc/slurm/slurm.conf).
	SlurmConf string `toml:"slurm_conf"`

	// MungeSocket turns on MUNGE authentication (see auth.go): agents,
	// admins and readers send a credential from their host's munged,
	// decoded through this socket (normally /run/munge/munge.socket.2).
	// A report is then taken only for a node in Slurm's node list, from a
	// credential made on one of that node's addresses (NodeAddr,
	// NodeHostname) by root or AgentUser, or with that node's own token;
	// the shared agent and admin tokens then speak for no node, but still
	// read and (admin) administer.
	MungeSocket string `toml:"munge_socket"`
	// AgentUser is a user, besides root, whose credentials may post
	// reports (an agent not run as root).
	AgentUser string `toml:"agent_user"`
	// SlurmUser administers with root; unset, it is read from
	// `scontrol show config` when MungeSocket is set.
	SlurmUser string `toml:"slurm_user"`
	// AdminUsers and AdminGroups (names or ids) also administer: catalog
	// changes, features, gc, removing nodes.
	AdminUsers  []string `toml:"admin_users"`
	AdminGroups []string `toml:"admin_groups"`
	// NodeTokensRequired makes everything that speaks for a node (reports,
	// swarm reports, pins, gc answers) need that node's own token (llmgw
	// nodes token NODE): a MUNGE credential then speaks for users and
	// admins only. Root on any host with the munge key can start a munged
	// with any --origin, and so speak for any node, as it can to Slurm; a
	// node's token is a secret of that node alone.
	NodeTokensRequired bool `toml:"node_tokens_required"`
	// FabricFeatures names the Slurm node features that are fabrics
	// (["ib-a", "ib-b"]): a node's fabric is then the one of them Slurm
	// lists it with (DefaultFabric with none), read with Slurm's node list,
	// and a report naming another is refused. Unset, a node's fabric is
	// its own report's word (agent.toml fabric).
	FabricFeatures []string `toml:"fabric_features"`
	// ForgetAfter: a node that is no longer in Slurm's node list and has
	// not reported for this long is forgotten (default DefaultForgetAfter).
	// Only with MungeSocket, which reads the list.
	ForgetAfter time.Duration `toml:"forget_after"`

	// SwarmLeaseTimeout: a fabric's origin lease holder that has not
	// reported for this long loses the lease (default
	// DefaultSwarmLeaseTimeout). See docs/design.md, "The swarm".
	SwarmLeaseTimeout time.Duration `toml:"swarm_lease_timeout"`
	// SwarmReportEvery is how often members are told to report (default
	// DefaultSwarmReportEvery).
	SwarmReportEvery time.Duration `toml:"swarm_report_every"`
	// SwarmMinChunk is the chunk size of every swarm (default
	// DefaultSwarmMinChunk, api.DefaultChunkSize; tests lower it for small
	// files), or, for a file that would need more than 65,536 of them, the
	// smallest number of MiB that does not: the coordinator's, never a
	// member's.
	SwarmMinChunk int64 `toml:"swarm_min_chunk"`

	// Prefetch turns the prefetcher off when false (issue 28; nil: on).
	// It runs only with Features, where the coordinator already speaks to
	// Slurm: once per backfill interval it reads the pending jobs' plans
	// and asks the planned nodes that lack a job's model to fetch it
	// ahead of the start, in the answers to their reports.
	// docs/design.md, "Prefetch".
	Prefetch *bool `toml:"prefetch"`
	// PrefetchHorizon is how far ahead of a job's expected start its nodes
	// are asked to fetch (default prefetch.DefaultHorizon).
	PrefetchHorizon time.Duration `toml:"prefetch_horizon"`
	// PrefetchMaxBytes bounds what one node is asked to prefetch at once
	// (default prefetch.DefaultMaxBytes; negative: no bound). The node
	// itself never takes more than the room it has without evicting.
	PrefetchMaxBytes int64 `toml:"prefetch_max_bytes"`
	// PrefetchWarmMax is the longest a job that asked to wait for its
	// weights (--llmgw-warm, through burst_buffer/lua) is held (default
	// prefetch.DefaultWarmMax); keep it below burst_buffer.conf's
	// StageInTimeout, past which Slurm holds the job for good.
	PrefetchWarmMax time.Duration `toml:"prefetch_warm_max"`
	// PrefetchInterval replaces the backfill interval read from Slurm
	// (tests; zero: bf_interval).
	PrefetchInterval time.Duration `toml:"-"`

	// Nodes, when set, replaces Slurm's node list (tests).
	Nodes NodeSource `toml:"-"`
}

// Swarm defaults. The lease timeout is long on purpose: a seed silent for
// 2.15 s on a loaded machine lost a 1.5 s lease in an earlier attempt and the
// origin served 3.125 copies instead of 3. A seed that really died is caught
// faster by its peers (Unreachable plus 500 ms of silence, swarm.go).
const (
	DefaultSwarmLeaseTimeout = 5 * time.Second
	DefaultSwarmReportEvery  = 250 * time.Millisecond
	DefaultSwarmMinChunk     = api.DefaultChunkSize
	// SwarmMaxChunk is the largest chunk size a swarm accepts.
	SwarmMaxChunk = 64 << 20
)

// DefaultForgetAfter: a day, so that a node out of Slurm's list for
// maintenance is still shown while it is worked on, and one removed for
// good leaves status by the next day.
const DefaultForgetAfter = 24 * time.Hour

// Feature reconciler defaults.
const (
	DefaultFeatureInterval = 30 * time.Second
	DefaultFeatureFile     = "/var/lib/llmgw/features"
	// DefaultFeatureListingMaxMB: see Config.FeatureListingMaxMB.
	DefaultFeatureListingMaxMB = maxNodeListing >> 20
	DefaultScontrol            = "/usr/bin/scontrol"
	DefaultSinfo               = "/usr/bin/sinfo"
)

// DefaultMaxBatch: a commit costs about as much as a few hundred row
// writes, so up to 256 reports share one.
const DefaultMaxBatch = 256

// DefaultMaxBatchWait: without a wait, batches averaged 2.5 reports while
// 10,000 nodes sent their first reports, each paying for its own commit;
// waiting 1 ms lifted that ingest from about 4,400 to 5,000-5,200 reports/s
// and the steady state from about 9,000 to 10,500 (scripts/bench/
// coordinator.sh, 2 cores). 3 ms was worse. An agent reports every 30 s, so
// the millisecond is not felt.
const DefaultMaxBatchWait = time.Millisecond

const maxBatchWait = time.Second

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DB == "" {
		c.DB = DefaultDB
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.StallAfter <= 0 {
		c.StallAfter = DefaultStallAfter
	}
	if c.FeatureInterval <= 0 {
		c.FeatureInterval = DefaultFeatureInterval
	}
	if c.FeatureFile == "" {
		c.FeatureFile = DefaultFeatureFile
	}
	if c.FeatureListingMaxMB <= 0 {
		c.FeatureListingMaxMB = DefaultFeatureListingMaxMB
	}
	if c.Scontrol == "" {
		c.Scontrol = DefaultScontrol
	}
	if c.Sinfo == "" {
		c.Sinfo = DefaultSinfo
	}
	if c.ForgetAfter <= 0 {
		c.ForgetAfter = DefaultForgetAfter
	}
	if c.SwarmLeaseTimeout <= 0 {
		c.SwarmLeaseTimeout = DefaultSwarmLeaseTimeout
	}
	if c.SwarmReportEvery <= 0 {
		c.SwarmReportEvery = DefaultSwarmReportEvery
	}
	if c.SwarmMinChunk <= 0 {
		c.SwarmMinChunk = DefaultSwarmMinChunk
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatchWait == 0 {
		c.MaxBatchWait = DefaultMaxBatchWait
	}
	if c.MaxBatchWait > maxBatchWait {
		// Every report waits this long for its answer; past a second it
		// is a mistake, not a tuning.
		c.MaxBatchWait = maxBatchWait
	}
	return c
}

// prefetchOn says whether the prefetcher runs: with the feature reconciler,
// unless turned off.
func (c Config) prefetchOn() bool {
	return c.Features && (c.Prefetch == nil || *c.Prefetch)
}

// Tokens are the bearer tokens the coordinator accepts besides the nodes'
// own (kept in the database), one per role. An empty token means the role
// is not configured.
type Tokens struct {
	Admin, Read string
}

// check refuses settings that cannot work, naming the key.
func (c Config) check() error {
	seen := map[string]bool{}
	for _, f := range c.FabricFeatures {
		if err := api.ValidFabricName(f); err != nil {
			return fmt.Errorf("fabric_features: %v", err)
		}
		if seen[f] {
			return fmt.Errorf("fabric_features names %q twice", f)
		}
		seen[f] = true
	}
	if c.SwarmMinChunk > SwarmMaxChunk {
		return fmt.Errorf("swarm_min_chunk %d is over the largest chunk size, %d bytes", c.SwarmMinChunk, int64(SwarmMaxChunk))
	}
	return c.checkRemoved()
}

// checkRemoved refuses settings that no longer exist but whose silent
// dropping would leave a cluster broken without saying why.
func (c Config) checkRemoved() error {
	if c.AgentTokenFile != "" {
		return fmt.Errorf("agent_token_file (--agent-token-file, %s) is no longer supported: one token for "+
			"every agent let any node report for all the others. Give each node its own token with "+
			"'llmgw nodes token NODE --out FILE' and install FILE as that node's agent.toml token_file "+
			"(or set munge_socket, and no token is needed); then remove agent_token_file", c.AgentTokenFile)
	}
	return nil
}

// LoadTokens reads the token files named in c.
func (c Config) LoadTokens() (Tokens, error) {
	var t Tokens
	for _, f := range []struct {
		path, flag string
		dst        *string
	}{
		{c.AdminTokenFile, "admin-token-file", &t.Admin},
		{c.ReadTokenFile, "read-token-file", &t.Read},
	} {
		if f.path == "" {
			continue
		}
		tok, err := api.ReadToken(f.path)
		if err != nil {
			return Tokens{}, fmt.Errorf("--%s: %w", f.flag, err)
		}
		*f.dst = tok
	}
	return t, nil
}

// role is what a request's token allows.
type role int

const (
	roleNone role = iota
	roleRead
	roleAgent
	roleAdmin
)

// roleOf says which configured token tok is. Every configured token is
// compared, each in constant time over its sha256 (so lengths leak nothing
// either), and none is skipped on a match, so timing says nothing about
// which one matched.
func (t Tokens) roleOf(tok string) role {
	if tok == "" {
		return roleNone
	}
	h := sha256.Sum256([]byte(tok))
	got := roleNone
	for _, c := range []struct {
		tok string
		r   role
	}{{t.Read, roleRead}, {t.Admin, roleAdmin}} {
		if c.tok == "" {
			continue
		}
		ch := sha256.Sum256([]byte(c.tok))
		if subtle.ConstantTimeCompare(h[:], ch[:]) == 1 && c.r > got {
			got = c.r
		}
	}
	return got
}
