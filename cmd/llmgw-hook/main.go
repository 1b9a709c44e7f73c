// llmgw-hook is the program slurmd runs as llmgw's Prolog, TaskProlog and
// Epilog: `llmgw-hook prolog|task-prolog|epilog [--config FILE] [agent
// flags]`, or installed under those names (the name it was started under
// says which hook it is).
//
// It is a program of its own, beside llmgw, because it starts on every job
// on every node, and Go runs the init of every package a binary links
// whatever the command: llmgw links net/http, prometheus and sqlite and
// starts in about 5 ms, a bash hook in 1.4 ms. This one links the fast path
// only (package prolog, the node config, the name rules; see deps_test.go),
// is built static and stripped, and parses neither TOML nor flags: it
// reads the resolved copy of agent.toml that llmgw's hooks leave beside it
// (nodeconf.WriteResolved). When the fast path cannot settle a job (weights
// missing, no resolved copy, flags, anything unusual) it execs `llmgw HOOK`
// with the same arguments, from beside its own executable; llmgw has the
// loader, the clients and the fetcher. A fetch takes minutes, and a few
// milliseconds more to start it are nothing.
//
// This package only wires.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/prolog"
)

// version is set at build time, as llmgw's is (make build gives both the
// same): a resolved copy of the configuration is used only if written by
// the same build, whose defaults it holds.
var version = "dev"

// fullEnv names the full llmgw binary the hook hands off to, for tests;
// unset (always, under slurmd, which passes the hooks no such variable), it
// is "llmgw" beside this executable.
const fullEnv = "LLMGW_HOOK_FULL"

func main() {
	hook, args := hookName(os.Args)
	os.Exit(run(hook, args))
}

// hookName takes the hook from the program's name when it was installed
// under a hook's name, else from the first argument.
func hookName(argv []string) (string, []string) {
	switch base := filepath.Base(argv[0]); base {
	case "prolog", "task-prolog", "epilog":
		return base, argv[1:]
	}
	if len(argv) > 1 {
		return argv[1], argv[2:]
	}
	return "", nil
}

func run(hook string, args []string) int {
	switch hook {
	case "prolog":
		return prologHook(args)
	case "task-prolog":
		return taskPrologHook(args)
	case "epilog":
		return epilogHook(args)
	}
	fmt.Fprintf(os.Stderr, "llmgw-hook: unknown hook %q; run as llmgw-hook prolog|task-prolog|epilog [--config FILE], or under one of those names\n", hook)
	// The TaskProlog's status fails the job; the others' drain the node, and
	// a wrongly installed hook is not the node's fault.
	return 0
}

// errFullLoad says the configuration must be loaded by llmgw itself.
var errFullLoad = errors.New("flags or LLMGW_* settings given")

// loadConfig returns the node's configuration without parsing it: the
// built-in defaults when the default file is absent (what llmgw's loader
// gives then, with no flags and no LLMGW_* settings), else the resolved
// copy. Anything else is for llmgw to load: an error sends the job there.
func loadConfig(args []string) (nodeconf.Agent, error) {
	if !plainArgs(args) || settingsInEnv() {
		return nodeconf.Agent{}, errFullLoad
	}
	path, explicit := nodeconf.Path(args, os.Getenv, nodeconf.DefaultFile)
	cfg, err := nodeconf.ReadResolved(path, version)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nodeconf.Agent{}.WithDefaults(), nil
	}
	if err != nil {
		return cfg, err
	}
	return cfg.WithDefaults(), nil
}

// plainArgs: no arguments, or only --config FILE.
func plainArgs(args []string) bool {
	switch len(args) {
	case 0:
		return true
	case 1:
		return strings.HasPrefix(args[0], "--config=")
	case 2:
		return args[0] == "--config"
	}
	return false
}

// settingsInEnv reports an LLMGW_* variable that would set a setting
// (nodeconf.SettingEnv; slurmd passes none, a hook run by hand may have
// some). The job's own LLMGW_MODEL, in a TaskProlog's environment, is not
// one.
func settingsInEnv() bool {
	for _, name := range nodeconf.SettingEnv {
		if os.Getenv(name) != "" {
			return true
		}
	}
	return false
}

// prologHook: a job naming no model is done at once; weights present are
// recorded by the fast path; everything else goes to `llmgw prolog`.
func prologHook(args []string) int {
	job, err := prolog.JobFromEnv(os.Getenv)
	if err == nil && job.Model == "" {
		return 0
	}
	if err == nil {
		var cfg nodeconf.Agent
		if cfg, err = loadConfig(args); err == nil {
			if err = prolog.Fast(cfg, job, time.Now()); err == nil {
				return 0
			}
		}
	}
	fmt.Fprintf(os.Stderr, "llmgw-hook prolog: job %s: %v; handing the job to llmgw prolog\n", os.Getenv("SLURM_JOB_ID"), err)
	return handOff("prolog", args)
}

// taskPrologHook prints the job's exports, or its failure and exits 1,
// which fails the job and not the node (see prolog.ErrJobFails). It runs
// as the job's user; without a resolved configuration it hands off to
// llmgw task-prolog, which loads agent.toml itself.
func taskPrologHook(args []string) int {
	cfg, err := loadConfig(args)
	if err != nil {
		return handOff("task-prolog", args)
	}
	if err := prolog.TaskProlog(cfg.RunDir, os.Getenv("SLURM_JOB_ID"), os.Getenv, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "llmgw-hook task-prolog: %v\n", err)
		return 1
	}
	return 0
}

// epilogHook clears the job's record and, when node gc is due, hands off
// to `llmgw epilog`, which claims and runs it within its bound.
func epilogHook(args []string) int {
	cfg, err := loadConfig(args)
	if err != nil {
		return handOff("epilog", args)
	}
	if job := os.Getenv("SLURM_JOB_ID"); job != "" {
		if err := prolog.ClearRecord(cfg.RunDir, job); err != nil {
			fmt.Fprintf(os.Stderr, "llmgw-hook epilog: job %s: %v\n", job, err)
		}
	}
	if !prolog.GCDue(cfg.RunDir, cfg.GCInterval, time.Now()) {
		return 0
	}
	return handOff("epilog", args)
}

// handOff replaces this process with `llmgw HOOK ARGS`. When that cannot
// be done the job goes on without llmgw (exit 0: never drain; for the
// TaskProlog, the job runs without LLMGW_MODEL_PATH), and the reason is
// on stderr.
func handOff(hook string, args []string) int {
	full, err := fullBinary()
	if err == nil {
		argv := append([]string{full, hook}, args...)
		err = syscall.Exec(full, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "llmgw-hook %s: job %s: cannot run llmgw %s: %v\n", hook, os.Getenv("SLURM_JOB_ID"), hook, err)
	return 0
}

func fullBinary() (string, error) {
	if p := os.Getenv(fullEnv); p != "" {
		return p, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(exe), "llmgw")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("the full binary is missing: install llmgw beside llmgw-hook")
	}
	return p, nil
}
