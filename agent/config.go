package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// Default agent settings.
const (
	DefaultConfigFile = "/etc/llmgw/agent.toml"
	DefaultSocket     = api.DefaultSocket
	DefaultCacheDir   = "/var/cache/llmgw"
	DefaultStateDir   = "/var/lib/llmgw"
	DefaultRunDir     = catalog.DefaultRunDir
	DefaultFabric     = api.DefaultFabric

	// DefaultReportInterval matches the coordinator's default: a node whose
	// reports stop for a few intervals is shown as stale there.
	DefaultReportInterval = 30 * time.Second
	// DefaultScanInterval is how often the weight directories are walked.
	// A scan sums the size of every file under them, which on a large
	// shared filer is real metadata load; a minute notices a new model well
	// before anyone schedules a job for it.
	DefaultScanInterval = time.Minute
	// DefaultConnections is how many ranges one fetch downloads at once:
	// the fetcher's own default, so llmgw fetch and the agent agree.
	DefaultConnections = fetch.DefaultConnections
	// DefaultNvidiaSMI is where NVIDIA's driver packages install nvidia-smi.
	// It is run by absolute path, like every subprocess llmgw starts.
	DefaultNvidiaSMI = "/usr/bin/nvidia-smi"
)

// minInterval keeps a typo ("30ms") from turning an agent into a load test
// of its own coordinator or filer.
const minInterval = time.Second

// Config is the agent's configuration: what `/etc/llmgw/agent.toml` holds,
// with LLMGW_* environment and flags layered over it by the command line.
// The zero value of every field means its default.
type Config struct {
	// Coordinator is the coordinator's base URL, e.g. "http://coord:8420".
	// Empty means the agent reports to nobody: it still scans, serves the
	// hooks and fetches, which is how a single machine runs it.
	Coordinator string `toml:"coordinator"`
	// TokenFile holds the agent's bearer token. It is read before every
	// report, so rotating the token needs no restart.
	TokenFile string `toml:"token_file"`

	// Node is this node's Slurm NodeName (default: SLURMD_NODENAME, else the
	// NodeName slurm.conf gives this host, else the short hostname). It
	// must be the name Slurm uses, since the coordinator writes features on
	// it.
	Node string `toml:"node"`
	// Fabric names the network this node shares with the nodes it can copy
	// from quickly (default DefaultFabric). Weights in one fabric do not
	// serve another.
	Fabric string `toml:"fabric"`

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
	// RunDir is the node-local runtime directory where the Prolog leaves a
	// record per job (default catalog.DefaultRunDir). gc reads the records
	// to leave alone the weights a running job uses.
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
	// reported as such and the rest of the scan carries on.
	DirTimeout time.Duration `toml:"dir_timeout"`
	// Connections is how many ranges one fetch downloads at once (default
	// DefaultConnections).
	Connections int `toml:"connections"`
	// LockDir is the node-local directory of the one-fetch-per-node locks
	// (default fetch.DefaultLockDir). The hooks' fallback fetch must use the
	// same one to wait for the agent's fetch; several simulated nodes on one
	// machine (llmgw demo) each need their own, and one that goes away with
	// them.
	LockDir string `toml:"lock_dir"`

	// GPUMemory is the node's total GPU memory in bytes, all GPUs together,
	// reported for placement's memory check. 0 (the default) asks NvidiaSMI;
	// set it where nvidia-smi is absent or says the wrong thing.
	GPUMemory int64 `toml:"gpu_memory"`
	// NvidiaSMI is the nvidia-smi binary asked for the GPU memory when
	// GPUMemory is 0 (default DefaultNvidiaSMI). When it does not exist the
	// node's GPU memory is unknown, and placement skips the memory check
	// there rather than exclude the node.
	NvidiaSMI string `toml:"nvidia_smi"`

	// Version is the agent's version, reported to the coordinator. Set by
	// the binary, never by the file.
	Version string `toml:"-"`
}

// withDefaults returns c with every zero field set to its default, except
// Node, which needs I/O to resolve (see DefaultNodeName).
func (c Config) withDefaults() Config {
	if c.Fabric == "" {
		c.Fabric = DefaultFabric
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = DefaultScanInterval
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.NvidiaSMI == "" {
		c.NvidiaSMI = DefaultNvidiaSMI
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return c
}

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Validate says what is wrong with c, naming the setting. Zero values are
// valid: they mean the defaults.
func (c Config) Validate() error {
	var errs []error
	if c.Coordinator != "" {
		u, err := url.Parse(c.Coordinator)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("coordinator %q: want a URL like http://coord:8420", c.Coordinator))
		}
	}
	if c.Node != "" {
		if err := api.ValidNodeName(c.Node); err != nil {
			errs = append(errs, fmt.Errorf("node: %w", err))
		}
	}
	if c.Fabric != "" {
		if err := api.ValidFabricName(c.Fabric); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range c.WeightDirs {
		if err := catalog.CheckAbsPath("weight dir", d); err != nil {
			errs = append(errs, err)
		}
	}
	if c.GPUMemory < 0 {
		errs = append(errs, fmt.Errorf("gpu memory %d: must be a byte count (or 0 to ask nvidia-smi)", c.GPUMemory))
	}
	for name, p := range map[string]string{"cache dir": c.CacheDir, "state dir": c.StateDir, "run dir": c.RunDir, "socket": c.Socket, "token file": c.TokenFile, "nvidia-smi": c.NvidiaSMI, "lock dir": c.LockDir} {
		if p != "" {
			if err := catalog.CheckAbsPath(name, p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(c.Socket) > maxSocketPath || len(filepath.Dir(c.Socket))+len("/.sock0123456789/s") > maxSocketPath {
		// sun_path holds 108 bytes, and the agent first binds in a private
		// directory beside the socket (see listenSocket).
		errs = append(errs, fmt.Errorf("socket %q: a unix socket path must be shorter than %d bytes, and its directory %d shorter", c.Socket, maxSocketPath, len("/.sock0123456789/s")))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("metrics listen %q: want HOST:PORT, e.g. 127.0.0.1:9482: %w", c.MetricsListen, err))
		}
	}
	for name, d := range map[string]time.Duration{"scan interval": c.ScanInterval, "report interval": c.ReportInterval, "dir timeout": c.DirTimeout} {
		if d != 0 && d < minInterval {
			errs = append(errs, fmt.Errorf("%s %s: must be at least %s (or 0 for the default)", name, d, minInterval))
		}
	}
	if c.Connections < 0 || c.Connections > 64 {
		errs = append(errs, fmt.Errorf("connections %d: must be between 1 and 64 (or 0 for the default)", c.Connections))
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, so that a log or a terminal shows every problem at once.
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	sort.Strings(msgs)
	return errors.New(strings.Join(msgs, "; "))
}

// DefaultNodeName is the name Slurm knows this host by: SLURMD_NODENAME when
// set (the hooks run with it), else the NodeName slurm.conf (SLURM_CONF, else
// slurm.DefaultConf) gives the short hostname, else the short hostname itself.
//
// A slurm.conf that puts several nodes on this host is an error rather than
// a guess: the operator must say which node this agent speaks for.
func DefaultNodeName(getenv func(string) string, hostname func() (string, error)) (string, error) {
	if n := getenv("SLURMD_NODENAME"); n != "" {
		return n, nil
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("node name: hostname: %w", err)
	}
	short, _, _ := strings.Cut(h, ".")
	conf := getenv("SLURM_CONF")
	if conf == "" {
		conf = slurm.DefaultConf
	}
	n, err := slurm.LookupNodeName(conf, short)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, slurm.ErrNoNodeName), errors.Is(err, fs.ErrNotExist):
		return short, nil
	}
	return "", fmt.Errorf("node name from %s: %w; pass --node NAME", conf, err)
}

// resolve returns c with defaults applied and the node name resolved, or
// why it cannot run.
func (c Config) resolve() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	c = c.withDefaults()
	if c.Node == "" {
		n, err := DefaultNodeName(os.Getenv, os.Hostname)
		if err != nil {
			return c, err
		}
		if err := api.ValidNodeName(n); err != nil {
			return c, fmt.Errorf("node name %q found for this host: %w; pass --node NAME", n, err)
		}
		c.Node = n
	}
	return c, nil
}
