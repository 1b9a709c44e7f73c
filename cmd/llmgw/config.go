package main

import (
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent/config"
)

// Configuration is layered by package config (defaults, the TOML file,
// LLMGW_* environment, flags), which the hook binary links too; these are
// its functions as every command here uses them.

// configPath: see config.Path.
func configPath(args []string, getenv func(string) string, def string) (path string, explicit bool) {
	return config.Path(args, getenv, def)
}

// decodeTOML: see config.DecodeTOML.
func decodeTOML(cmd, path string, explicit bool, v any) error {
	return config.DecodeTOML(cmd, path, explicit, v)
}

// applyEnv: see config.ApplyEnv. A bad value is a usage error: the
// variable is named, and it is where the mistake is.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	if err := config.ApplyEnv(fs, getenv); err != nil {
		return usagef("", "%v", err)
	}
	return nil
}
