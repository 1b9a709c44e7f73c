package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Each layer only overrides what it sets. The order of work follows from that: the file must be read before the
// flags are defined (so that --help shows the values in force and an unset
// flag keeps the file's value), and the environment applies only to flags the
// command line did not set.

// ArgError is a mistake in the command line or in an LLMGW_* variable, as
// opposed to one in the file or in a value: the caller says how to get help.
type ArgError struct{ Err error }

func (e *ArgError) Error() string { return e.Err.Error() }
func (e *ArgError) Unwrap() error { return e.Err }

// Load layers the node's configuration for the command cmd ("agent",
// "prolog", ...): defaults, the file (--config in args, else LLMGW_CONFIG,
// else DefaultFile, whose absence is no error), LLMGW_* environment, then
// the flags in args, which it defines on fs (after any the caller defined
// there). The agent and the hooks call it alike, so a setting means the same
// to both. The result is validated, defaults not yet applied.
//
// A flag or environment mistake is an *ArgError; pflag.ErrHelp is returned
// as it is, after fs.Usage has run.
func Load(fs *pflag.FlagSet, cmd string, args []string, getenv func(string) string) (Agent, error) {
	var cfg Agent
	path, explicit := Path(args, getenv, DefaultFile)
	if err := DecodeTOML(cmd, path, explicit, &cfg); err != nil {
		return cfg, err
	}
	fs.String("config", path, "TOML configuration file")
	Flags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return cfg, err
		}
		return cfg, &ArgError{err}
	}
	if err := ApplyEnv(fs, getenv); err != nil {
		return cfg, &ArgError{err}
	}
	AbsPaths(fs, &cfg)
	if err := Validate(cfg); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// DecodeTOML reads a TOML file into v. A key v has no field for is an error
// naming the key: a misspelt setting silently ignored is a node that runs
// with a default nobody chose.
func DecodeTOML(cmd, path string, explicit bool, v any) error {
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

// EnvName is the environment variable that stands for a flag:
// --cache-dir is LLMGW_CACHE_DIR.
func EnvName(flag string) string {
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

// ApplyEnv sets every setting the command line left unset from its LLMGW_*
// variable, if that is set. The error names the variable, since that is
// where the bad value is.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || notSettings[f.Name] {
			return
		}
		v := getenv(EnvName(f.Name))
		if v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%s=%q: %v", EnvName(f.Name), v, serr)
		}
	})
	return err
}

// Flags defines a flag for every setting, its default the value already in
// cfg (from the file).
func Flags(fs *pflag.FlagSet, cfg *Agent) {
	fs.StringVar(&cfg.Coordinator, "coordinator", cfg.Coordinator, "coordinator base URL, e.g. http://coord:8420 (none: report to nobody)")
	fs.StringVar(&cfg.TokenFile, "token-file", cfg.TokenFile, "file holding the agent's bearer token")
	fs.StringVar(&cfg.MungeSocket, "munge-socket", cfg.MungeSocket, "munged's socket: authenticate reports with a MUNGE credential when no token file exists, and peers always")
	fs.StringVar(&cfg.TLSCA, "tls-ca", cfg.TLSCA, "PEM file of the CA that signed the coordinator's TLS certificate")
	fs.StringVar(&cfg.Node, "node", cfg.Node, "this node's Slurm NodeName (default: SLURMD_NODENAME, else slurm.conf's name for this host, else the short hostname)")
	fs.StringVar(&cfg.Fabric, "fabric", orDefault(cfg.Fabric, DefaultFabric), "the fabric (network) this node is on")
	fs.StringSliceVar(&cfg.WeightDirs, "weights-dir", cfg.WeightDirs, "a directory to look for weights in; repeat for several (none: report no weights)")
	fs.StringVar(&cfg.CacheDir, "cache-dir", orDefault(cfg.CacheDir, DefaultCacheDir), "where remote sources are fetched to (always scanned too)")
	fs.StringVar(&cfg.StateDir, "state-dir", orDefault(cfg.StateDir, DefaultStateDir), "where the catalog copy (catalog.json) is kept")
	fs.StringVar(&cfg.RunDir, "run-dir", orDefault(cfg.RunDir, DefaultRunDir), "node-local runtime directory: the hooks' job records, fetch locks")
	fs.StringVar(&cfg.Socket, "socket", orDefault(cfg.Socket, DefaultSocket), "unix socket the hooks talk to (created mode 0600)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "address to serve Prometheus metrics on, e.g. 127.0.0.1:9482 (none: no metrics)")
	fs.DurationVar(&cfg.ScanInterval, "scan-interval", orDefault(cfg.ScanInterval, DefaultScanInterval), "how often to scan the weight directories")
	fs.DurationVar(&cfg.ReportInterval, "report-interval", orDefault(cfg.ReportInterval, DefaultReportInterval), "how often to report when nothing changed (±10%)")
	fs.DurationVar(&cfg.DirTimeout, "dir-timeout", cfg.DirTimeout, "how long one directory may take to scan before it is reported as not answering (0: the default, 10s)")
	fs.IntVar(&cfg.Connections, "connections", orDefault(cfg.Connections, DefaultConnections), "connections per fetch")
	fs.Var(&bytesFlag{v: &cfg.GPUMemory}, "gpu-memory", "the node's total GPU memory, e.g. 640G (default: ask nvidia-smi)")
	fs.StringVar(&cfg.NvidiaSMI, "nvidia-smi", orDefault(cfg.NvidiaSMI, DefaultNvidiaSMI), "nvidia-smi to ask for the GPU memory (absent: unknown)")
	fs.DurationVar(&cfg.FetchDeadline, "fetch-deadline", orDefault(cfg.FetchDeadline, DefaultFetchDeadline), "how long a Prolog waits for weights; keep it below slurm.conf's PrologEpilogTimeout")
	fs.DurationVar(&cfg.GCInterval, "gc-interval", orDefault(cfg.GCInterval, DefaultGCInterval), "how often, at most, an Epilog runs node gc")
	fs.DurationVar(&cfg.GCTimeout, "gc-timeout", orDefault(cfg.GCTimeout, DefaultGCTimeout), "how long one Epilog's gc may take")
}

// AbsPaths makes the paths given by flag or environment absolute. A
// relative path there means the directory it was typed in; in the file it
// means nothing, and Validate says so.
func AbsPaths(fs *pflag.FlagSet, cfg *Agent) {
	for name, p := range map[string]*string{"token-file": &cfg.TokenFile, "tls-ca": &cfg.TLSCA, "munge-socket": &cfg.MungeSocket, "cache-dir": &cfg.CacheDir, "state-dir": &cfg.StateDir, "run-dir": &cfg.RunDir, "socket": &cfg.Socket, "nvidia-smi": &cfg.NvidiaSMI} {
		if fs.Changed(name) && *p != "" {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	if fs.Changed("weights-dir") {
		for i, d := range cfg.WeightDirs {
			if abs, err := filepath.Abs(d); err == nil && d != "" {
				cfg.WeightDirs[i] = abs
			}
		}
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// bytesFlag is a byte count flag that takes units (catalog.ParseBytes).
type bytesFlag struct{ v *int64 }

func (f *bytesFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f *bytesFlag) Set(s string) error {
	n, err := catalog.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

func (f *bytesFlag) Type() string { return "BYTES" }
