package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// Default agent settings; see package config, which the hooks link too.
const (
	DefaultConfigFile     = config.DefaultFile
	DefaultSocket         = config.DefaultSocket
	DefaultCacheDir       = config.DefaultCacheDir
	DefaultStateDir       = config.DefaultStateDir
	DefaultFabric         = config.DefaultFabric
	DefaultReportInterval = config.DefaultReportInterval
	DefaultScanInterval   = config.DefaultScanInterval
	DefaultConnections    = config.DefaultConnections
	DefaultPeerPort       = config.DefaultPeerPort
)

// Config is the agent's configuration. It lives in package config because
// the Slurm hooks read the same file and must find the same paths.
type Config = config.Agent

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
func resolve(c Config) (Config, error) {
	if err := config.Validate(c); err != nil {
		return c, err
	}
	c = c.WithDefaults()
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
