// llmgw-hook is the program slurmd runs as llmgw's Prolog, TaskProlog and
// Epilog: `llmgw-hook prolog|task-prolog|epilog [--config FILE] [agent
// flags]`, or installed under those names (the name it was started under
// says which hook it is).
//
// It is a program of its own, beside llmgw, because it starts on every job
// on every node, and Go runs the init of every package a binary links
// whatever the command: llmgw links net/http, prometheus and sqlite and
// starts in about 5 ms, a bash hook in 1.4 ms. This one links the fast path
// only (package prolog, the node config, the name rules; see deps_test.go)
// and is built static (CGO_ENABLED=0; pflag imports net, which with cgo
// would make it wait for the dynamic loader). When the fast path cannot
// settle a job (weights missing, anything unusual) it execs `llmgw HOOK`
// beside it, which has the clients and the fetcher: a fetch takes minutes,
// and a few milliseconds more to start it are nothing.
//
// This package only wires.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/prolog"
)

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

func loadConfig(hook string, args []string) (config.Agent, error) {
	fs := pflag.NewFlagSet("llmgw-hook "+hook, pflag.ContinueOnError)
	fs.Usage = func() {}
	cfg, err := config.Load(fs, hook, args, os.Getenv)
	if err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%s takes no arguments, got %q", hook, fs.Args())
	}
	return cfg.WithDefaults(), nil
}

// prologHook: a job naming no model is done at once; weights present are
// recorded by the fast path; everything else goes to `llmgw prolog`.
func prologHook(args []string) int {
	job, err := prolog.JobFromEnv(os.Getenv)
	if err == nil && job.Model == "" {
		return 0
	}
	if err == nil {
		var cfg config.Agent
		if cfg, err = loadConfig("prolog", args); err == nil {
			if err = prolog.Fast(cfg, job, time.Now()); err == nil {
				return 0
			}
		}
	}
	fmt.Fprintf(os.Stderr, "llmgw-hook prolog: job %s: %v; handing the job to llmgw prolog\n", os.Getenv("SLURM_JOB_ID"), err)
	return handOff("prolog", args)
}

// taskPrologHook prints the job's exports, or its failure and exits 1,
// which fails the job and not the node (see prolog.ErrJobFails). It never
// hands off: it runs as the job's user, who may not ask the agent for
// anything.
func taskPrologHook(args []string) int {
	job := os.Getenv("SLURM_JOB_ID")
	cfg, err := loadConfig("task-prolog", args)
	if err != nil {
		// Without its configuration it cannot find the record; a job that
		// asked for a model then fails with the reason, others run.
		fmt.Fprintf(os.Stderr, "llmgw-hook task-prolog: job %s: %v\n", job, err)
		if m := os.Getenv(prolog.EnvModel); m != "" {
			fmt.Printf("print %s\n", prolog.Reason(fmt.Sprintf("job %s asks for model %s, but llmgw's configuration cannot be read: %v", job, m, err)))
			return 1
		}
		return 0
	}
	if err := prolog.TaskProlog(cfg.RunDir, job, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "llmgw-hook task-prolog: %v\n", err)
		return 1
	}
	return 0
}

// epilogHook clears the job's record and, when node gc is due, hands off
// to `llmgw epilog`, which claims and runs it within its bound.
func epilogHook(args []string) int {
	cfg, err := loadConfig("epilog", args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "llmgw-hook epilog: job %s: %v\n", os.Getenv("SLURM_JOB_ID"), err)
		return 0
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
// be done the job goes on without llmgw (exit 0: never drain), and the
// reason is in slurmd's log.
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
