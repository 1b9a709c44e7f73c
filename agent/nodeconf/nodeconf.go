// Package nodeconf is the node's llmgw configuration as the programs use
// it: the settings of /etc/llmgw/agent.toml, their defaults, their checks,
// the paths derived from them, and a resolved copy for the hook binary.
//
// Two programs use it: the agent (`llmgw agent`) and the Slurm hooks
// (`llmgw-hook`, and `llmgw prolog|task-prolog|epilog`). They must agree on
// every path, the cache directory and the catalog copy above all: a hook
// that looked for weights somewhere else than the agent put them would
// fetch them again on every job. So both take the configuration through
// package agent/config, which layers the TOML file, LLMGW_* environment and
// flags into the Agent defined here.
//
// This package is what the hook binary links, and it is small on purpose:
// the standard library, the catalog leaf and internal/jsonlite. Checking a configuration
// (config.Validate) is the loader's job: the hook reads only copies the
// full binary checked before writing them. The TOML decoder and the flag parser
// cost the hook about a third of a millisecond on every job start (measured,
// scripts/bench/hook.sh), so it does not parse agent.toml at all: it reads
// the resolved copy that llmgw's own hooks write after loading the file (see
// WriteResolved), which is valid only while the file is unchanged.
package nodeconf

import (
	"path/filepath"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// SettingEnv are the environment variables that set one of the agent's
// settings: LLMGW_<FLAG> for every flag config.Flags defines that is a
// setting (config.ApplyEnv, which applies them when not empty; a test in
// agent/config holds the two lists equal). The hook binary hands a job to
// llmgw when one is set, since only llmgw's loader applies them. Other
// LLMGW_* variables leave the configuration as the file says: among them
// LLMGW_MODEL and LLMGW_MODEL_PATH, which the SPANK plugin and the
// TaskProlog put in every model job's environment.
var SettingEnv = []string{
	"LLMGW_COORDINATOR", "LLMGW_TOKEN_FILE", "LLMGW_TLS_CA", "LLMGW_MUNGE_SOCKET", "LLMGW_NODE", "LLMGW_FABRIC",
	"LLMGW_WEIGHTS_DIR", "LLMGW_CACHE_DIR", "LLMGW_STATE_DIR", "LLMGW_RUN_DIR",
	"LLMGW_SOCKET", "LLMGW_METRICS_LISTEN", "LLMGW_SCAN_INTERVAL",
	"LLMGW_REPORT_INTERVAL", "LLMGW_DIR_TIMEOUT", "LLMGW_CONNECTIONS",
	"LLMGW_NVIDIA_SMI", "LLMGW_FETCH_DEADLINE", "LLMGW_GC_INTERVAL",
	"LLMGW_GC_TIMEOUT",
}

// Default settings.
const (
	DefaultFile     = "/etc/llmgw/agent.toml"
	DefaultCacheDir = "/var/cache/llmgw"
	DefaultStateDir = "/var/lib/llmgw"
	DefaultRunDir   = catalog.DefaultRunDir
	// DefaultSocket is api.DefaultSocket; the agent's tests hold them equal
	// (package api links net/http, which the hook binary must not).
	DefaultSocket = DefaultRunDir + "/agent.sock"
	DefaultFabric = catalog.DefaultFabric
	// DefaultPeerPort is the port of the peer chunk server on
	// peer_interface: the one after the coordinator's 8420.
	DefaultPeerPort = 8421

	// DefaultReportInterval matches the coordinator's default: a node whose
	// reports stop for a few intervals is shown as stale there.
	DefaultReportInterval = 30 * time.Second
	// DefaultScanInterval is how often the weight directories are walked.
	// A scan sums the size of every file under them, which on a large
	// shared filer is real metadata load; a minute notices a new model well
	// before anyone schedules a job for it.
	DefaultScanInterval = time.Minute
	// DefaultConnections is how many ranges one fetch downloads at once:
	// fetch.DefaultConnections, spelled again because naming it would link
	// the fetcher into the hook binary; agent's tests hold the two equal.
	DefaultConnections = 8
	// DefaultNvidiaSMI is where NVIDIA's driver packages install nvidia-smi.
	// It is run by absolute path, like every subprocess llmgw starts.
	DefaultNvidiaSMI = "/usr/bin/nvidia-smi"

	// DefaultFetchDeadline bounds how long a Prolog waits for weights. It
	// must stay below slurm.conf's PrologEpilogTimeout: a Prolog killed by
	// that timeout counts as failed and drains the node (docs/slurm/behaviour.md §5),
	// whereas one that gives up by itself records why and exits 0. Slurm's
	// default PrologEpilogTimeout is 65534 s; sites that set one usually set
	// minutes, so the default is well under the usual ten.
	DefaultFetchDeadline = 5 * time.Minute
	// DefaultGCInterval is how often, at most, an Epilog runs node gc.
	DefaultGCInterval = 10 * time.Minute
	// DefaultGCTimeout bounds one Epilog's gc, so that job end, and the
	// node's return to idle, is not held up by a slow filesystem.
	DefaultGCTimeout = 20 * time.Second
	// DefaultDirTimeout is scan.DefaultDirTimeout, spelled again because
	// naming it would link the scanner into the hook binary; prolog/full's
	// tests hold the two equal.
	DefaultDirTimeout = 10 * time.Second
	// DefaultGCMaxShare is the percent of its cache a node's gc removes in
	// one run at most, unless forced. Half: retiring one of two models,
	// the common change, still collects by itself, while a catalog that
	// lost most of its entries (a wrong or restored coordinator, a script
	// gone wrong) cannot empty a node's cache without an operator saying
	// so with `llmgw gc --collect --force`. Refetching half a cache is an
	// hour's nuisance; refetching all of it on every node is an outage.
	DefaultGCMaxShare = 50
	// DefaultGCPartMaxAge is how long a fetch's .part may sit untouched
	// before gc takes it even for a source the catalog still wants: a week
	// covers a weekend's queue of jobs that would resume it.
	DefaultGCPartMaxAge = 7 * 24 * time.Hour
	// DefaultCacheHigh and DefaultCacheLow are weights/evict's
	// DefaultHigh and DefaultLow, spelled again because the hook binary
	// links this package and must not link the eviction code; agent's
	// tests hold them equal.
	DefaultCacheHigh = 90
	DefaultCacheLow  = 80
	// DefaultKeepLastCopyFor is weights/evict's DefaultKeepLastCopyFor:
	// a week, so a model run every weekday keeps a copy in each fabric
	// that runs it.
	DefaultKeepLastCopyFor = 7 * 24 * time.Hour
	// DefaultHookFSTimeout bounds one filesystem operation of a hook: a
	// filer answering a stat in 4 s is slow, one silent for 30 s is not
	// answering.
	DefaultHookFSTimeout = 30 * time.Second
)

// Agent is the node's configuration: what `/etc/llmgw/agent.toml` holds,
// with LLMGW_* environment and flags layered over it (see Load). The zero
// value of every field means its default.
type Agent struct {
	// Coordinator is the coordinator's base URL, e.g. "http://coord:8420".
	// Empty means the agent reports to nobody: it still scans, serves the
	// hooks and fetches, which is how a single machine runs it.
	Coordinator string `toml:"coordinator"`
	// TokenFile holds the agent's bearer token. It is read before every
	// report, so rotating the token needs no restart.
	TokenFile string `toml:"token_file"`
	// MungeSocket, when set, makes the agent authenticate reports with a
	// MUNGE credential from this munged (normally
	// /run/munge/munge.socket.2) instead of the token: the coordinator
	// then knows the node by the credential's origin address.
	MungeSocket string `toml:"munge_socket"`
	// TLSCA is a PEM file of the CA that signed the coordinator's TLS
	// certificate. With it the coordinator must be an https:// URL whose
	// certificate that CA signed: the catalog the agent copies decides what
	// root fetches on this node.
	TLSCA string `toml:"tls_ca"`

	// Node is this node's Slurm NodeName (default: SLURMD_NODENAME, else the
	// NodeName slurm.conf gives this host, else the short hostname). It
	// must be the name Slurm uses, since the coordinator writes features on
	// it.
	Node string `toml:"node"`
	// Fabric names the network this node shares with the nodes it can copy
	// from quickly (default DefaultFabric). Weights in one fabric do not
	// serve another.
	Fabric string `toml:"fabric"`
	// PeerAddr is host:port this node serves its verified cache files on,
	// to the nodes of its own fabric (issue 18: one copy per fabric). Set
	// it, or PeerInterface; with neither the node neither serves nor joins
	// a swarm and fetches every file from its origin.
	PeerAddr string `toml:"peer_addr"`
	// PeerInterface names the fabric's network interface ("ib0"): its first
	// IPv4 address (else IPv6), resolved when the agent starts, with
	// PeerPort, is the peer address. PeerAddr, when set, wins.
	PeerInterface string `toml:"peer_interface"`
	// PeerPort is the port served on PeerInterface's address (default
	// DefaultPeerPort).
	PeerPort int `toml:"peer_port"`

	// WeightDirs are the directories the agent looks in for weights. None
	// (the default) means the node reports no weights and ranks exactly like
	// a node that looked and found nothing.
	WeightDirs []string `toml:"weight_dirs"`
	// CacheDir is where remote sources are fetched to (default
	// DefaultCacheDir). It is always scanned too: what the agent fetched,
	// the node holds. Its free space is reported for placement's disk check.
	CacheDir string `toml:"cache_dir"`
	// StateDir holds the node-local catalog copy, catalog.json (default
	// DefaultStateDir).
	StateDir string `toml:"state_dir"`
	// RunDir is the node-local runtime directory (default DefaultRunDir, on
	// a tmpfs): the hooks' job records, the Epilog's gc stamp, and the
	// fetch locks that make one fetch per source per node across processes.
	RunDir string `toml:"run_dir"`
	// Socket is the unix socket the hooks talk to (default DefaultSocket).
	// It is created mode 0600: only root may ask for fetches.
	Socket string `toml:"socket"`
	// MetricsListen is an address ("127.0.0.1:9482") to serve Prometheus
	// metrics on at /metrics. Empty serves none.
	MetricsListen string `toml:"metrics_listen"`

	// ScanInterval is how often the weight directories are scanned
	// (default DefaultScanInterval).
	ScanInterval time.Duration `toml:"scan_interval"`
	// ReportInterval is how often the agent reports when nothing changed
	// (default DefaultReportInterval), each time ±10% so that a thousand
	// agents started together do not report together.
	ReportInterval time.Duration `toml:"report_interval"`
	// DirTimeout bounds the scan of one directory (default
	// scan.DefaultDirTimeout); a mount that does not answer in time is
	// reported as such and the rest of the scan carries on. The hooks give
	// a job's weights the same time (FSTimeout).
	DirTimeout time.Duration `toml:"dir_timeout"`
	// Connections is how many ranges one fetch downloads at once (default
	// DefaultConnections).
	Connections int `toml:"connections"`
	// HFTokenFile is a file holding the Hugging Face token, read when
	// neither $HF_TOKEN nor $HF_TOKEN_PATH is set: slurmd runs a Prolog with
	// no $HOME, where huggingface-cli's own token file cannot be found.
	HFTokenFile string `toml:"hf_token_file"`
	// HFEndpoint is the Hub the node fetches Hugging Face models from
	// (default $HF_ENDPOINT in the agent's environment, else
	// https://huggingface.co): a site's mirror.
	HFEndpoint string `toml:"hf_endpoint"`
	// HFCache is the Hugging Face cache Hub models are fetched into, in
	// huggingface_hub's layout, and that jobs of them are given as
	// HF_HUB_CACHE (default: "hub" inside CacheDir). A site may name its
	// shared Hugging Face cache on a filer; it is scanned like a weight
	// directory.
	HFCache string `toml:"hf_cache"`
	// HFHubOffline, unless set to false, has the TaskProlog export
	// HF_HUB_OFFLINE=1 beside HF_HUB_CACHE for a job of a Hub model, so
	// that the engine loads what llmgw fetched and asks the Hub nothing.
	HFHubOffline *bool `toml:"hf_hub_offline"`
	// CacheReserve is the free space, in bytes, that a fetch from an origin
	// giving no length leaves on the cache's filesystem (0: 5% of it, at
	// most 10 GB; -1: none).
	CacheReserve int64 `toml:"cache_reserve"`
	// FetchMinSpeed drops a fetch's connection that delivers fewer bytes a
	// second than this over 30 s, handing its range to another (0: 64 KiB/s;
	// -1: never).
	FetchMinSpeed int64 `toml:"fetch_min_speed"`

	// GPUMemory is the node's total GPU memory in bytes, all GPUs together,
	// for placement's memory check. 0 asks NvidiaSMI; when that is absent
	// too the memory is unknown, and the check is skipped, never excluding
	// the node.
	GPUMemory int64 `toml:"gpu_memory"`
	// NvidiaSMI is the nvidia-smi asked for the GPU memory when GPUMemory
	// is 0 (default DefaultNvidiaSMI).
	NvidiaSMI string `toml:"nvidia_smi"`

	// FetchDeadline bounds a Prolog's wait for weights (default
	// DefaultFetchDeadline); keep it below PrologEpilogTimeout. The agent
	// does not use it: a fetch it runs for a Prolog that gave up continues
	// while another job waits for it, and otherwise stops, keeping its bytes.
	FetchDeadline time.Duration `toml:"fetch_deadline"`
	// GCInterval is how often, at most, an Epilog runs node gc (default
	// DefaultGCInterval); GCTimeout bounds one run (default DefaultGCTimeout).
	GCInterval time.Duration `toml:"gc_interval"`
	GCTimeout  time.Duration `toml:"gc_timeout"`

	// GCMaxShare is the percent of the cache's bytes one gc run may
	// remove (default DefaultGCMaxShare; 100 sets no bound). A run that
	// would remove more removes nothing and says so, unless forced.
	GCMaxShare int `toml:"gc_max_share"`
	// GCPartMaxAge is how long a fetch's .part and .part.ranges may sit
	// untouched before gc removes them, wanted or not (default
	// DefaultGCPartMaxAge). Those of a source no catalog entry wants go at
	// the first gc.
	GCPartMaxAge time.Duration `toml:"gc_part_max_age"`

	// CacheHigh and CacheLow are the cache's watermarks, in percent of the
	// space llmgw may use on the cache's filesystem (what it fetched plus
	// what is free, less cache_reserve): above CacheHigh the agent evicts
	// what llmgw fetched down to CacheLow (weights/evict). 0: the defaults,
	// DefaultCacheHigh and DefaultCacheLow.
	CacheHigh int `toml:"cache_high"`
	CacheLow  int `toml:"cache_low"`
	// KeepLastCopyFor keeps a fabric's last copy of a model a job used
	// within it from eviction (default DefaultKeepLastCopyFor; negative:
	// never).
	KeepLastCopyFor time.Duration `toml:"keep_last_copy_for"`
	// HookFSTimeout bounds each filesystem operation a hook makes on a
	// job's weights (a stat, a read of a header): one that has not
	// answered within it is "no answer", and the hook tells a hung mount
	// from a slow one by it, not by the time the whole look took (default
	// DefaultHookFSTimeout). The whole look is bounded by the Prolog's own
	// deadline (fetch_deadline).
	HookFSTimeout time.Duration `toml:"hook_fs_timeout"`

	// Version is the agent's version, reported to the coordinator. Set by
	// the binary, never by the file.
	Version string `toml:"-"`
}

// WithDefaults returns c with every zero field set to its default, except
// Node, which needs I/O to resolve (see agent.DefaultNodeName).
func (c Agent) WithDefaults() Agent {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Fabric, DefaultFabric)
	def(&c.CacheDir, DefaultCacheDir)
	def(&c.StateDir, DefaultStateDir)
	def(&c.RunDir, DefaultRunDir)
	def(&c.Socket, DefaultSocket)
	def(&c.NvidiaSMI, DefaultNvidiaSMI)
	def(&c.Version, "dev")
	dur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	dur(&c.ScanInterval, DefaultScanInterval)
	dur(&c.ReportInterval, DefaultReportInterval)
	dur(&c.FetchDeadline, DefaultFetchDeadline)
	dur(&c.GCInterval, DefaultGCInterval)
	dur(&c.GCTimeout, DefaultGCTimeout)
	dur(&c.GCPartMaxAge, DefaultGCPartMaxAge)
	dur(&c.KeepLastCopyFor, DefaultKeepLastCopyFor)
	dur(&c.HookFSTimeout, DefaultHookFSTimeout)
	if c.CacheHigh == 0 {
		c.CacheHigh = DefaultCacheHigh
	}
	if c.CacheLow == 0 {
		c.CacheLow = DefaultCacheLow
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.GCMaxShare == 0 {
		c.GCMaxShare = DefaultGCMaxShare
	}
	return c
}

// FSTimeout bounds each filesystem operation a hook makes on a job's
// weights (HookFSTimeout, else DefaultHookFSTimeout): one that has had no
// answer for it is a filesystem not answering. The whole look is bounded
// by FetchDeadline, the Prolog's own.
func (c Agent) FSTimeout() time.Duration {
	if c.HookFSTimeout > 0 {
		return c.HookFSTimeout
	}
	return DefaultHookFSTimeout
}

// HFCacheDir is the node's Hugging Face cache: HFCache, else "hub" in
// CacheDir. Call it on a config with defaults applied.
func (c Agent) HFCacheDir() string { return catalog.HFCacheDir(c.CacheDir, c.HFCache) }

// HubOffline reports whether a job of a Hub model is given
// HF_HUB_OFFLINE=1 (hf_hub_offline, default true).
func (c Agent) HubOffline() bool { return c.HFHubOffline == nil || *c.HFHubOffline }

// CatalogFile is the name of the catalog copy in the state directory.
const CatalogFile = "catalog.json"

// CatalogCopyPath is where the agent keeps the node-local catalog copy and
// the hooks read it. Call it on a config with defaults applied.
func (c Agent) CatalogCopyPath() string { return filepath.Join(c.StateDir, CatalogFile) }

// LockDir is where fetches on this node take their per-file locks, agent
// and hooks alike, so that one fetch per source runs on the node whoever
// starts it. It is "" for the default run dir: the fetcher's own default,
// which is DefaultRunDir/locks when this process may write there and a
// private directory otherwise (a non-root agent on a workstation).
func (c Agent) LockDir() string {
	if c.RunDir == "" || c.RunDir == DefaultRunDir {
		return ""
	}
	return filepath.Join(c.RunDir, "locks")
}
