// Package config layers the node's configuration the way operators expect
// of a daemon: built-in defaults, then the TOML file, then LLMGW_*
// environment variables, then flags, into a nodeconf.Agent. The agent and
// llmgw's Slurm hooks load it through here alike, so a setting means the
// same to both; the hook binary, which must start fast, reads the copy of
// the result that the hooks leave (nodeconf.WriteResolved) instead.
package config

import (
	"github.com/llmgw/llmgw/agent/nodeconf"
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
	DefaultNvidiaSMI      = nodeconf.DefaultNvidiaSMI
	DefaultFetchDeadline  = nodeconf.DefaultFetchDeadline
	DefaultGCInterval     = nodeconf.DefaultGCInterval
	DefaultGCTimeout      = nodeconf.DefaultGCTimeout
)

// Path: see nodeconf.Path.
func Path(args []string, getenv func(string) string, def string) (path string, explicit bool) {
	return nodeconf.Path(args, getenv, def)
}
