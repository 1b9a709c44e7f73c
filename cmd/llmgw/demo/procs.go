package demo

// The demo's processes (llmgw's own binary as coordinator and agents) and the
// commands it shows: started, watched, shown and stopped, every one of them
// under the demo's temporary directory.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childEnv is this process's environment without LLMGW_* variables, so that
// nothing exported in the user's shell reaches into the demo's processes
// (the environment would win over their configuration files), plus extra.
func childEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LLMGW_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// clientEnv is the environment the commands shown run with: they find the
// coordinator and the admin token as a user's shell would.
func (d *demoRun) clientEnv() []string {
	return []string{"LLMGW_COORDINATOR=" + d.coordURL, "LLMGW_TOKEN_FILE=" + d.adminToken}
}

// start runs a long-lived process (an llmgw command, or another program
// when args[0] is an absolute path) with its output in logPath. It gets its
// own process group, so that Ctrl-C reaches the demo alone and the demo
// stops everything in order, and it is sent SIGTERM if the demo dies.
func (d *demoRun) start(_ context.Context, name, logPath string, args ...string) (*demoProc, error) {
	bin := d.bin
	if filepath.IsAbs(args[0]) {
		bin, args = args[0], args[1:]
	}
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &demoProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	d.procs = append(d.procs, p)
	return p, nil
}

// stop sends p SIGTERM and waits for it to exit; one that has not after
// five seconds is killed.
func (d *demoRun) stop(p *demoProc) {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.stopping = true
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		d.say("   %s (pid %d) ignored SIGTERM for 5s; killing it", p.name, p.cmd.Process.Pid)
		p.cmd.Process.Kill()
		<-p.done
	}
}

// waitLog waits for a JSON log line of p with message msg and returns its
// field key: how the coordinator says which port it took.
func (d *demoRun) waitLog(ctx context.Context, p *demoProc, msg, key string) (string, error) {
	var val string
	err := d.waitFor(ctx, p.name+" to start", func() (bool, error) {
		f, err := os.Open(p.log)
		if err != nil {
			return false, nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
				if v, ok := line[key].(string); ok {
					val = v
					return true, nil
				}
			}
		}
		select {
		case <-p.done:
			return false, fmt.Errorf("%s exited: %v", p.name, p.err)
		default:
		}
		return false, nil
	})
	return val, err
}

// waitFor polls cond until it holds, fails, demoWait passes or ctx ends.
func (d *demoRun) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(demoWait)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, p := range d.procs {
			select {
			case <-p.done:
				if !p.stopping {
					return fmt.Errorf("waiting for %s: %s exited (%v); its log is below", what, p.name, p.err)
				}
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not within %s", what, demoWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// output runs `llmgw args...` and returns its stdout; a failure carries its
// stderr.
func (d *demoRun) output(ctx context.Context, env []string, args ...string) (string, error) {
	stdout, stderr, err := d.exec(ctx, env, args...)
	if err != nil {
		return stdout, fmt.Errorf("llmgw %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

func (d *demoRun) exec(ctx context.Context, env []string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, args...)
	cmd.Env = childEnv(env...)
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// show runs `llmgw args...` as the user would, printing the command line and
// what it printed, and returns its stdout.
func (d *demoRun) show(ctx context.Context, env []string, args ...string) (string, error) {
	stdout, _, err := d.showBoth(ctx, env, args...)
	return stdout, err
}

// showBoth is show that returns stderr too.
func (d *demoRun) showBoth(ctx context.Context, env []string, args ...string) (string, string, error) {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if strings.ContainsAny(a, " '\"$") {
			quoted[i] = strconv.Quote(a)
		}
	}
	d.say("$ llmgw %s", strings.Join(quoted, " "))
	stdout, stderr, err := d.exec(ctx, env, args...)
	d.indent(stdout)
	d.indent(stderr)
	if err != nil {
		return stdout, stderr, fmt.Errorf("llmgw %s: %w", strings.Join(args, " "), err)
	}
	return stdout, stderr, nil
}

// jsonOf runs `llmgw args...` (with --json among them) and decodes its
// answer into v.
func (d *demoRun) jsonOf(ctx context.Context, env []string, v any, args ...string) error {
	out, err := d.output(ctx, env, args...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("llmgw %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// indent prints a command's output under it, its tables realigned for
// the paths written as $DEMO.
func (d *demoRun) indent(text string) {
	text = strings.TrimRight(d.short(text), "\n")
	if text == "" {
		return
	}
	for _, l := range strings.Split(Realign(text), "\n") {
		fmt.Fprintf(d.out, "    %s\n", l)
	}
}

// showLogs prints the end of every process's log, for a demo that failed.
func (d *demoRun) showLogs() {
	for _, p := range d.procs {
		b, err := os.ReadFile(p.log)
		if err != nil || len(b) == 0 {
			continue
		}
		// The coordinator logs every request; what went wrong is in the rest.
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if !strings.Contains(l, `"msg":"request"`) {
				lines = append(lines, l)
			}
		}
		d.say("--- the end of %s's log (%s)", p.name, p.log)
		for _, l := range lines[max(0, len(lines)-5):] {
			d.say("    %s", l)
		}
	}
}

// --- cleanup -----------------------------------------------------------------

// stopFUSE unmounts the filer and waits for bindfs to exit.
func (d *demoRun) stopFUSE() error {
	if d.fuse == nil {
		return nil
	}
	p := d.fuse
	d.fuse = nil
	var errs []error
	var st syscall.Statfs_t
	if syscall.Statfs(d.filer, &st) == nil && st.Type == fuseMagic {
		if err := syscall.Unmount(d.filer, 0); err != nil {
			// Something still has a file open there; detach it now, the
			// kernel finishes when it lets go.
			if err := syscall.Unmount(d.filer, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", d.filer, err))
			}
		}
	}
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		d.stop(p)
	}
	return errors.Join(errs...)
}

// cleanup stops everything the demo started, in order (the fetch left
// running, the agents, the job, the coordinator, then the mount and the
// origin), puts back the dev cluster's features, removes the temporary
// directory, and says so. It runs on success, failure and Ctrl-C alike.
func (d *demoRun) cleanup() error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if d.bgCancel != nil {
		d.bgCancel()
		<-d.bgDone
	}
	var wg sync.WaitGroup
	stopped := len(d.procs)
	for _, p := range d.procs {
		if strings.HasPrefix(p.name, "agent ") {
			wg.Add(1)
			go func() { defer wg.Done(); d.stop(p) }()
		}
	}
	wg.Wait()
	if c := d.cluster; c != nil {
		if c.jobID != "" {
			if _, err := c.runner.Run(ctx, "scancel", c.jobID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range d.procs {
		if p.name == "coordinator" {
			d.stop(p)
		}
	}
	if c := d.cluster; c != nil {
		if err := c.restoreFeatures(ctx); err != nil {
			errs = append(errs, fmt.Errorf("putting back the dev cluster's node features: %w", err))
		}
		if err := c.unpointHooks(); err != nil {
			errs = append(errs, fmt.Errorf("removing the demo's hook settings from the dev cluster: %w", err))
		}
	}
	mounted := d.fuse != nil
	if err := d.stopFUSE(); err != nil {
		errs = append(errs, err)
	}
	if d.origin != nil {
		d.origin.Close()
	}
	for _, p := range d.procs {
		d.stop(p)
	}
	var st syscall.Statfs_t
	if d.filer != "" && syscall.Statfs(d.filer, &st) == nil && st.Type == fuseMagic {
		// Never remove through a live mount.
		errs = append(errs, fmt.Errorf("%s is still mounted; left %s in place: unmount it (umount %s), then remove it", d.filer, d.dir, d.filer))
	} else if err := os.RemoveAll(d.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", d.dir, err))
	}
	what := fmt.Sprintf("%d processes stopped", stopped)
	if mounted {
		what += ", the FUSE mount unmounted"
	}
	if d.cluster != nil {
		what += ", the dev cluster's features put back"
	}
	dir := d.dir
	d.dir = "" // say it in full: it is gone
	if len(errs) == 0 {
		d.say("\nCleaned up in %.1fs: %s, %s removed.", time.Since(start).Seconds(), what, dir)
		return nil
	}
	d.say("\nCleanup: %s; but:", what)
	for _, err := range errs {
		d.say("   %v", err)
	}
	return errors.Join(errs...)
}
