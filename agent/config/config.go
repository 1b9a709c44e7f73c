// Package config layers the node's configuration the way operators expect
// of a daemon: built-in defaults, then the TOML file, then LLMGW_*
// environment variables, then flags, into a nodeconf.Agent. The agent and
// llmgw's Slurm hooks load it through here alike, so a setting means the
// same to both; the hook binary, which must start fast, reads the copy of
// the result that the hooks leave (nodeconf.WriteResolved) instead.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Agent is the node's configuration; see nodeconf.Agent.
type Agent = nodeconf.Agent

// Defaults; see package nodeconf.
const (
	DefaultFile           = nodeconf.DefaultFile
	DefaultCacheDir       = nodeconf.DefaultCacheDir
	DefaultStateDir       = nodeconf.DefaultStateDir
	DefaultRunDir         = nodeconf.DefaultRunDir
	DefaultSocket         = nodeconf.DefaultSocket
	DefaultFabric         = nodeconf.DefaultFabric
	DefaultReportInterval = nodeconf.DefaultReportInterval
	DefaultScanInterval   = nodeconf.DefaultScanInterval
	DefaultConnections    = nodeconf.DefaultConnections
	DefaultPeerPort       = nodeconf.DefaultPeerPort
	DefaultNvidiaSMI      = nodeconf.DefaultNvidiaSMI
	DefaultFetchDeadline  = nodeconf.DefaultFetchDeadline
	DefaultGCInterval     = nodeconf.DefaultGCInterval
	DefaultGCTimeout      = nodeconf.DefaultGCTimeout
)

// Path: see nodeconf.Path.
func Path(args []string, getenv func(string) string, def string) (path string, explicit bool) {
	return nodeconf.Path(args, getenv, def)
}

// minInterval keeps a typo ("30ms") from turning an agent into a load test
// of its own coordinator or filer.
const minInterval = time.Second

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Validate says what is wrong with c, naming the setting. Zero values are
// valid: they mean the defaults.
func Validate(c Agent) error {
	var errs []error
	if c.Coordinator != "" {
		u, err := url.Parse(c.Coordinator)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("coordinator %q: want a URL like http://coord:8420", c.Coordinator))
		} else if c.TLSCA != "" && u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("coordinator %q: tls_ca is set, so give the coordinator's https:// URL; over http:// its answers could be rewritten on the way", c.Coordinator))
		}
	}
	if c.Node != "" {
		if err := slurm.ValidNodeName(c.Node); err != nil {
			errs = append(errs, fmt.Errorf("node: %w", err))
		}
	}
	if c.Fabric != "" {
		if err := slurm.ValidFabricName(c.Fabric); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PeerAddr != "" {
		if h, p, err := net.SplitHostPort(c.PeerAddr); err != nil || h == "" || p == "" || p == "0" {
			errs = append(errs, fmt.Errorf("peer_addr %q: want HOST:PORT, the node's own address on its fabric, e.g. 10.1.0.5:8421", c.PeerAddr))
		}
	}
	if c.PeerPort < 0 || c.PeerPort > 65535 {
		errs = append(errs, fmt.Errorf("peer_port %d: want a TCP port, 1-65535", c.PeerPort))
	}
	for _, d := range c.WeightDirs {
		if err := catalog.CheckAbsPath("weight dir", d); err != nil {
			errs = append(errs, err)
		}
	}
	if c.GPUMemory < 0 {
		errs = append(errs, fmt.Errorf("gpu memory %d: must be a byte count (or 0 to ask nvidia-smi)", c.GPUMemory))
	}
	if c.HFEndpoint != "" {
		if u, err := url.Parse(c.HFEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("hf_endpoint %q: want the Hub's (or a mirror's) base URL, e.g. https://hf-mirror.example.org", c.HFEndpoint))
		}
	}
	for name, p := range map[string]string{"hf_cache": c.HFCache, "cache dir": c.CacheDir, "state dir": c.StateDir, "run dir": c.RunDir, "socket": c.Socket, "token file": c.TokenFile, "munge socket": c.MungeSocket, "tls_ca": c.TLSCA, "nvidia-smi": c.NvidiaSMI} {
		if p != "" {
			if err := catalog.CheckAbsPath(name, p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(c.Socket) > maxSocketPath || len(filepath.Dir(c.Socket))+len("/.sock0123456789/s") > maxSocketPath {
		// sun_path holds 108 bytes, and the agent first binds in a private
		// directory beside the socket (see agent's listenSocket).
		errs = append(errs, fmt.Errorf("socket %q: a unix socket path must be shorter than %d bytes, and its directory %d shorter", c.Socket, maxSocketPath, len("/.sock0123456789/s")))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("metrics listen %q: want HOST:PORT, e.g. 127.0.0.1:9482: %w", c.MetricsListen, err))
		}
	}
	for name, d := range map[string]time.Duration{"scan interval": c.ScanInterval, "report interval": c.ReportInterval, "dir timeout": c.DirTimeout,
		"fetch deadline": c.FetchDeadline, "gc interval": c.GCInterval, "gc timeout": c.GCTimeout, "gc part max age": c.GCPartMaxAge, "hook fs timeout": c.HookFSTimeout} {
		if d != 0 && d < minInterval {
			errs = append(errs, fmt.Errorf("%s %s: must be at least %s (or 0 for the default)", name, d, minInterval))
		}
	}
	if c.FetchMinSpeed < -1 {
		errs = append(errs, fmt.Errorf("fetch min speed %d: give bytes a second, 0 for the default or -1 for none", c.FetchMinSpeed))
	}
	if c.CacheReserve < -1 {
		errs = append(errs, fmt.Errorf("cache reserve %d: give bytes to keep free, 0 for the default or -1 for none", c.CacheReserve))
	}
	if c.GCMaxShare < 0 || c.GCMaxShare > 100 {
		errs = append(errs, fmt.Errorf("gc max share %d: must be a percent between 1 and 100 (or 0 for the default)", c.GCMaxShare))
	}
	for name, v := range map[string]int{"cache_high": c.CacheHigh, "cache_low": c.CacheLow} {
		if v < 0 || v > 100 {
			errs = append(errs, fmt.Errorf("%s %d: must be a percent between 1 and 100 (or 0 for the default)", name, v))
		}
	}
	if hi, lo := c.CacheHigh, c.CacheLow; hi > 0 && lo > 0 && lo >= hi {
		errs = append(errs, fmt.Errorf("cache_low %d%% must be below cache_high %d%%: the agent evicts from above the high watermark down to the low one", lo, hi))
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
