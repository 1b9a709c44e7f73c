package main

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
)

// Configuration is layered the way operators expect of a daemon: built-in
// defaults, then the TOML file, then LLMGW_* environment variables, then
// flags. Each layer only overrides what it sets.
//
// The order of work follows from that: the file must be read before the
// flags are defined (so that --help shows the values in force and an unset
// flag keeps the file's value), and the environment applies only to flags the
// command line did not set.

// configPath finds --config in args, else LLMGW_CONFIG, else def. explicit is
// false only for the built-in default, whose absence is not an error: a node
// configured entirely by flags has no file.
func configPath(args []string, getenv func(string) string, def string) (path string, explicit bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, true
		}
		if a == "--config" && i+1 < len(args) {
			return args[i+1], true
		}
	}
	if v := getenv("LLMGW_CONFIG"); v != "" {
		return v, true
	}
	return def, false
}

// decodeTOML reads a TOML file into v. A key v has no field for is an error
// naming the key: a misspelt setting silently ignored is a node that runs
// with a default nobody chose.
func decodeTOML(cmd, path string, explicit bool, v any) error {
	if path == "" {
		return nil
	}
	md, err := toml.DecodeFile(path, v)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return fmt.Errorf("config %s: %s", path, perr.ErrorWithPosition())
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return fmt.Errorf("config %s: unknown key %s; remove it, or check its spelling against 'llmgw %s --help'",
			path, strings.Join(keys, ", "), cmd)
	}
	return nil
}

// envName is the environment variable that stands for a flag:
// --cache-dir is LLMGW_CACHE_DIR.
func envName(flag string) string {
	return "LLMGW_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// notSettings are flags that choose what a command does, describe the one
// thing it acts on, or say how it prints; they are not how llmgw is
// configured. The environment does not set them: an LLMGW_ONCE or
// LLMGW_SHA256 left exported in a shell would silently change, or attach a
// wrong digest to, every later command.
var notSettings = map[string]bool{
	"config": true, "help": true, "json": true, "once": true,
	"size": true, "sha256": true, "gpu-memory": true, "dry-run": true,
	// A job's environment has LLMGW_MODEL (the SPANK plugin and the
	// TaskProlog set it): llmgw place and llmgw sbatch inside a job must
	// name their model.
	"model": true, "nodes": true, "partition": true,
}

// applyEnv sets every setting the command line left unset from its LLMGW_*
// variable, if that is set. The error names the variable, since that is
// where the bad value is.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || notSettings[f.Name] {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("", "%s=%q: %v", envName(f.Name), v, serr)
		}
	})
	return err
}
