package demo

// The demo's last step, when a dev cluster is up: a real job through llmgw sbatch,
// with the hooks pointed at the demo's agents for its length and the
// cluster's own settings and features put back after.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// demoCluster is the dev cluster step 8 submits to.
type demoCluster struct {
	conf   string
	runner *slurm.Runner
	// before is every node's features before the demo's coordinator
	// touched them, to put back at the end.
	before []slurm.Node
	jobID  string
	// hookConfs are the per-node configurations the demo wrote for the dev
	// cluster's hooks (llmgw/NODE.toml beside its slurm.conf), removed at
	// the end with the resolved copies the hooks leave beside them.
	hookConfs []string
}

// pointHooks makes the dev cluster's hooks on each demo node read that
// node's demo configuration: scripts/slurm/hook passes --config
// llmgw/NODE.toml from beside slurm.conf when the file exists, so the job's
// Prolog finds the demo's catalog copy, cache and agent socket, and the job
// gets LLMGW_MODEL_PATH. A file someone else put there is left alone.
func (d *demoRun) pointHooks() {
	c := d.cluster
	dir := filepath.Join(filepath.Dir(c.conf), "llmgw")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		d.say("   (the dev cluster's hooks keep their own settings: %v)", err)
		return
	}
	for _, n := range Nodes {
		dst := filepath.Join(dir, n.Name+".toml")
		if _, err := os.Lstat(dst); err == nil {
			d.say("   (%s exists and is not the demo's: the hooks on %s use it)", dst, n.Name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(d.dir, n.Name, "agent.toml"))
		if err == nil {
			err = os.WriteFile(dst, b, 0o644)
		}
		if err != nil {
			d.say("   (the hooks on %s keep their own settings: %v)", n.Name, err)
			continue
		}
		c.hookConfs = append(c.hookConfs, dst)
	}
	if len(c.hookConfs) > 0 {
		d.say("   The dev cluster's hooks read llmgw/NODE.toml beside its slurm.conf: the demo points them at its own nodes' settings.")
	}
}

// unpointHooks removes what pointHooks wrote, and the resolved copies the
// hooks left beside it.
func (c *demoCluster) unpointHooks() error {
	var errs []error
	for _, f := range c.hookConfs {
		for _, p := range []string{f, nodeconf.ResolvedPath(f)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if len(c.hookConfs) > 0 {
		os.Remove(filepath.Dir(c.hookConfs[0])) // only when empty
	}
	c.hookConfs = nil
	return errors.Join(errs...)
}

// findCluster decides, before anything starts, whether step 8 can run: the
// coordinator must be started with features on for it.
func (d *demoRun) findCluster(ctx context.Context) {
	switch {
	case d.noCluster:
		d.skipWhy = "--no-cluster was given"
		return
	}
	conf := d.getenv("SLURM_CONF")
	if conf == "" {
		conf = devClusterConf
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		d.skipWhy = "the dev cluster is not up (no " + conf + "); bring it up with `sudo scripts/dev-cluster up`, then run `llmgw demo` again"
		return
	}
	if !regexp.MustCompile(`(?m)^\s*ClusterName=llmgw-dev\s*$`).Match(b) {
		d.skipWhy = conf + " is not the dev cluster's (ClusterName=llmgw-dev); the demo never writes features or submits jobs on another cluster"
		return
	}
	// sinfo against a slurmctld that is not running waits out its timeout;
	// the dev cluster's pid file says so at once (scripts/dev-cluster down
	// keeps slurm.conf, so its presence proves nothing).
	if why := slurmctldDown(conf); why != "" {
		d.skipWhy = "the dev cluster is not up (" + why + "); bring it up with `sudo scripts/dev-cluster up`, then run `llmgw demo` again"
		return
	}
	r := &slurm.Runner{Env: []string{"SLURM_CONF=" + conf}, Timeout: 5 * time.Second}
	nodes, err := r.Nodes(ctx)
	if err != nil {
		d.skipWhy = fmt.Sprintf("the dev cluster is not answering (%v); bring it up with `sudo scripts/dev-cluster up`, then run `llmgw demo` again", err)
		return
	}
	for _, n := range Nodes {
		if !slices.ContainsFunc(nodes, func(s slurm.Node) bool { return s.Name == n.Name }) {
			d.skipWhy = "the dev cluster has no node " + n.Name
			return
		}
	}
	d.cluster = &demoCluster{conf: conf, runner: r, before: nodes}
}

// slurmctldDown says why the slurmctld of the slurm.conf at conf is not
// running on this host, from its SlurmctldPidFile, or "" when it may be.
// Only a pid file that names no live slurmctld counts as down: a conf
// without one, or one that cannot be read for another reason, is left to
// sinfo.
func slurmctldDown(conf string) string {
	c, err := slurm.ReadConf(conf)
	if err != nil {
		return ""
	}
	pidFile, ok := c.Get("SlurmctldPidFile")
	if !ok || pidFile == "" {
		return ""
	}
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "no " + pidFile
	}
	if err != nil {
		return ""
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return ""
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.TrimSpace(string(comm)) != "slurmctld") {
		return fmt.Sprintf("slurmctld, pid %d in %s, is not running", pid, pidFile)
	}
	return ""
}

func (d *demoRun) stepSbatch(ctx context.Context) error {
	d.step(8, "A real job with llmgw sbatch",
		"on the dev cluster, a job wanting a model is steered to the node that holds it, by a preference Slurm can satisfy, never a filter.")
	c := d.cluster
	if c == nil {
		d.say("   (skipped: %s)", d.skipWhy)
		return nil
	}
	// The model held on n3 alone: on an idle cluster Slurm takes the first
	// idle node, n1, so a job that runs on n3 went there because of the
	// preference, not by chance.
	model, holder := Local.Model, LocalHolder
	feature := placement.FeaturePrefix + model
	if err := d.waitFor(ctx, "Slurm to show feature "+feature+" on "+holder, func() (bool, error) {
		nodes, err := c.runner.Nodes(ctx)
		if err != nil {
			return false, nil
		}
		for _, n := range nodes {
			if n.Name == holder && slices.Contains(n.Active, feature) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	d.say("   The coordinator has put feature %s on %s in Slurm (sinfo -N -o '%%N %%f' shows it).", feature, holder)
	d.pointHooks()
	script := filepath.Join(d.dir, "job.sh")
	text := fmt.Sprintf(`#!/bin/sh
#SBATCH --job-name=llmgw-demo
#SBATCH --output=%s/job-%%j.out
echo "ran on $SLURMD_NODENAME; LLMGW_MODEL=$LLMGW_MODEL LLMGW_MODEL_PATH=$LLMGW_MODEL_PATH"
`, d.dir)
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		return err
	}
	env := append(d.clientEnv(), "SLURM_CONF="+c.conf)
	out, notes, err := d.showBoth(ctx, env, "sbatch", "--model", model, script)
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("llmgw sbatch printed no job id: %q", out)
	}
	c.jobID = m[1]
	var state, where string
	if err := d.waitFor(ctx, "job "+c.jobID+" to run", func() (bool, error) {
		b, err := c.runner.Run(ctx, "scontrol", "show", "job", "-o", c.jobID)
		if err != nil {
			return false, nil
		}
		state, where = field(string(b), "JobState"), field(string(b), "NodeList")
		return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED", nil
	}); err != nil {
		return err
	}
	d.say("   job %s: %s on %s", c.jobID, state, where)
	if b, err := os.ReadFile(filepath.Join(d.dir, "job-"+c.jobID+".out")); err == nil {
		d.indent(string(b))
	}
	preferred := strings.Contains(notes, "--prefer") && strings.Contains(notes, feature)
	switch {
	case where == holder && preferred:
		d.explain([]string{fmt.Sprintf("It ran on %s, the node that holds %s: llmgw sbatch added --prefer %s because Slurm's features showed a node that can meet it, "+
			"and Slurm, which would otherwise have taken the first idle node, honoured it.", holder, model, feature)})
	case where == holder:
		d.explain([]string{fmt.Sprintf("It ran on %s, the node that holds %s, but llmgw sbatch added no preference (its notes above say why): Slurm put it there on its own.", holder, model)})
	case preferred:
		d.explain([]string{fmt.Sprintf("It ran on %s, not on %s which holds %s: a preference is not a filter, and Slurm placed it elsewhere (was %s busy?).", where, holder, model, holder)})
	default:
		d.explain([]string{fmt.Sprintf("It ran on %s, not on %s which holds %s: llmgw sbatch added no preference (its notes above say why).", where, holder, model)})
	}
	return nil
}

// field is NAME's value in `scontrol show job -o` output.
func field(out, name string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// restoreFeatures puts back every node's features as they were before the
// demo: the demo's coordinator added llmgw.* ones, and a feature left behind
// would steer real jobs to weights that are gone.
func (c *demoCluster) restoreFeatures(ctx context.Context) error {
	now, err := c.runner.Nodes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, put := range slurm.PutBack(c.before, now) {
		if _, err := c.runner.Run(ctx, "scontrol", put.Args()...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// --- processes ---------------------------------------------------------------
