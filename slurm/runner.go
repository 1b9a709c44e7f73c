package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Default Runner settings.
const (
	// DefaultDir is where Debian's slurm-client installs sinfo, scontrol,
	// squeue and sbatch.
	DefaultDir = "/usr/bin"

	// DefaultTimeout bounds one Slurm command. sinfo and scontrol answer in
	// tens of milliseconds on a healthy cluster (docs/slurm/behaviour.md §3: 0.06 s for
	// a 1000-node update); ten seconds is a controller that is not there.
	DefaultTimeout = 10 * time.Second

	// DefaultWaitDelay is how long Run waits, after the command is killed or
	// exits, for its output pipes to close. A child the command left behind
	// can hold them open; without a bound Run would wait for that child.
	DefaultWaitDelay = time.Second
)

// A Runner runs Slurm's command-line tools. Every Slurm subprocess in llmgw
// goes through one, so each has a timeout, an argument vector rather than a
// shell string, and errors that name the command. The zero value is ready to
// use with the defaults.
type Runner struct {
	// Dir is the directory holding the Slurm commands (default DefaultDir).
	// Commands are run by absolute path, not looked up in $PATH: slurmd runs
	// the Prolog and Epilog with no PATH at all (docs/slurm/behaviour.md §4). Tests
	// point Dir at scripts that print captured output.
	Dir string

	// Timeout bounds each command (default DefaultTimeout). A caller's
	// context may end it sooner.
	Timeout time.Duration

	// WaitDelay is passed to exec.Cmd (default DefaultWaitDelay).
	WaitDelay time.Duration

	// Paths names the command to run for a bare name, by absolute path,
	// where it is not in Dir: a site whose scontrol is /opt/slurm/bin/scontrol
	// but whose sinfo is elsewhere. Nil: every command is in Dir.
	Paths map[string]string

	// Env holds extra NAME=value pairs added to this process's environment
	// for every command, e.g. "SLURM_CONF=/var/tmp/llmgw-dev-cluster/slurm.conf".
	// Slurm's clients find the cluster through SLURM_CONF; the hooks inherit
	// it from slurmd. Nil adds nothing.
	Env []string
}

// CommandError is a Slurm command that failed: it could not start, exited
// non-zero, or ran out of time. Err is the cause (an *exec.ExitError, or an
// error wrapping context.DeadlineExceeded or context.Canceled).
type CommandError struct {
	Args   []string // the command name and its arguments, as run
	Stderr string   // the command's stderr, trimmed
	Err    error
}

func (e *CommandError) Error() string {
	msg := strings.Join(e.Args, " ") + ": " + e.Err.Error()
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// maxStderr bounds how much of a command's stderr an error carries. Slurm
// prints one or two lines when it fails; a flood would make the error, and
// the log line that prints it, unreadable.
const maxStderr = 2048

// command is the Slurm command name with args as Run and Pipe start it:
// by absolute path (r.Paths[name], else r.Dir/name), r's WaitDelay and
// environment, bounded by ctx.
func (r *Runner) command(ctx context.Context, name string, args []string) (*exec.Cmd, error) {
	all := append([]string{name}, args...)
	if name == "" || strings.ContainsRune(name, '/') {
		return nil, &CommandError{Args: all, Err: errors.New("want a bare command name, found in Runner.Dir")}
	}
	dir := r.Dir
	if dir == "" {
		dir = DefaultDir
	}
	path := filepath.Join(dir, name)
	if p, ok := r.Paths[name]; ok {
		if !filepath.IsAbs(p) {
			return nil, &CommandError{Args: all, Err: fmt.Errorf("path %q is not absolute", p)}
		}
		path = p
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = r.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = DefaultWaitDelay
	}
	if r.Env != nil {
		cmd.Env = append(os.Environ(), r.Env...)
	}
	return cmd, nil
}

// Run runs the Slurm command name (a bare name such as "sinfo", found in
// r.Dir) with args and returns its stdout. A non-zero exit, a failure to
// start and a timeout are returned as *CommandError with the trimmed stderr,
// together with whatever the command wrote to stdout before it failed.
func (r *Runner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	all := append([]string{name}, args...)
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := r.command(ctx, name, args)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err = cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	// After a timeout the error from Run is only "signal: killed"; say why
	// it was killed, and keep errors.Is(err, context.DeadlineExceeded).
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s: %w", timeout, ctxErr)
		} else {
			err = ctxErr
		}
	}
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > maxStderr {
		msg = msg[:maxStderr] + "…"
	}
	return stdout.Bytes(), &CommandError{Args: all, Stderr: msg, Err: err}
}
