//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// siteHookDirs returns the directories the dev cluster's Prolog and Epilog
// globs run, or skips when the cluster names llmgw's hooks directly.
// scripts/dev-cluster's default layout is the README's install: prolog.d/*
// and epilog.d/* holding llmgw's hooks as the link 00-llmgw. Its "lines"
// layout (24.05 and later) is the other: the glob on one Prolog= line,
// llmgw's hook on the next.
func siteHookDirs(t *testing.T) (prologDir, epilogDir string) {
	t.Helper()
	conf, err := slurm.ReadConf(os.Getenv("SLURM_CONF"))
	if err != nil {
		t.Fatal(err)
	}
	dirOf := func(key string) string {
		all := conf.All(key)
		for _, p := range all {
			if strings.HasSuffix(p, "/*") {
				return strings.TrimSuffix(p, "/*")
			}
		}
		t.Skipf("%s=%q in %s is no directory glob: bring the dev cluster up with LLMGW_DEV_HOOK_LAYOUT=dir (its default)", key, all, os.Getenv("SLURM_CONF"))
		return ""
	}
	return dirOf("Prolog"), dirOf("Epilog")
}

// siteScript installs a site's hook in dir: it appends "NAME job=J node=N"
// to the dev cluster's hooks.log, where llmgw's hooks (scripts/slurm/hook)
// log their own line, so that the log holds the order slurmd ran them in
// on each node. It exits 1 when the file site-fail.NAME.JOB.NODE exists in the
// directory above dir (not in dir: slurmd would run it, and a file it
// cannot run fails the Prolog on every node), which lets a test fail it for
// one job on one node. /bin/sh with no PATH, as slurmd runs it.
func siteScript(t *testing.T, dir, file, name, logFile string) {
	t.Helper()
	p := filepath.Join(dir, file)
	script := fmt.Sprintf("#!/bin/sh\n"+
		"printf '%%s job=%%s node=%%s\\n' %s \"$SLURM_JOB_ID\" \"$SLURMD_NODENAME\" >>%s\n"+
		"if [ -e %s/site-fail.%s.\"$SLURM_JOB_ID\".\"$SLURMD_NODENAME\" ]; then\n"+
		"\techo \"%s: this node fails the site's check\" >&2\n\texit 1\nfi\nexit 0\n",
		name, logFile, filepath.Dir(dir), name, name)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(p) })
}

var hookLine = regexp.MustCompile(`(\S+) job=(\d+) node=(\S+)`)

// hookOrder reads hooks.log: for job, the hooks each node ran, in order.
// slurmd runs one node's Prolog scripts one after the other, so the order
// their lines were appended in is the order they ran in.
func hookOrder(t *testing.T, logFile, job string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	order := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		m := hookLine.FindStringSubmatch(line)
		if m == nil || m[2] != job || m[1] == "task-prolog" {
			continue
		}
		order[m[3]] = append(order[m[3]], m[1])
	}
	return order
}

func submitHeld(t *testing.T, sl *slurm.Runner, args ...string) string {
	t.Helper()
	out, err := sl.Run(context.Background(), "sbatch", append([]string{"--parsable", "-H", "-o", "/dev/null"}, args...)...)
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	job := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { sl.Run(context.Background(), "scancel", job) })
	return job
}

// jobField is one Key=Value of `scontrol show job -o`.
func jobField(sl *slurm.Runner, job, key string) string {
	out, err := sl.Run(context.Background(), "scontrol", "show", "job", "-o", job)
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// nodeField is one Key=Value of `scontrol show node -o`; Reason's value
// runs to the end of the line's next field, so it is read up to " ".
func nodeField(sl *slurm.Runner, node, key string) string {
	out, err := sl.Run(context.Background(), "scontrol", "show", "node", "-o", node)
	if err != nil {
		return ""
	}
	s := string(out)
	i := strings.Index(s, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := s[i+len(key)+2:]
	if j := strings.Index(v, " "); j >= 0 && key != "Reason" {
		v = v[:j]
	}
	return strings.TrimSpace(v)
}

// TestSiteHooksBeside: llmgw's Prolog and Epilog installed the README's
// way, beside a site's own scripts, on the real dev cluster of each
// release: as a link in the site's prolog.d and epilog.d, or (run with
// LLMGW_DEV_HOOK_LAYOUT=lines, 24.05 and later) as a Prolog= line after the
// site's.
//
// The site's health check (50-site-health) and GPU setup (10-site-gpu) run
// before llmgw's hook, and the site's epilog before llmgw's gc: slurmd
// runs a directory glob in reverse byte order, and Prolog= lines in turn
// (docs/slurm/behaviour.md §10). When the site's health check fails on one node, that node is
// drained and the job requeued held, as Slurm does for any failing Prolog,
// and llmgw's hook on that node never runs, so it cannot make the Prolog
// succeed.
func TestSiteHooksBeside(t *testing.T) {
	_, sl := clusterBin(t)
	ctx := context.Background()
	prologDir, epilogDir := siteHookDirs(t)
	logFile := filepath.Join(filepath.Dir(os.Getenv("SLURM_CONF")), "log", "hooks.log")
	siteScript(t, prologDir, "50-site-health", "site-health", logFile)
	siteScript(t, prologDir, "10-site-gpu", "site-gpu", logFile)
	siteScript(t, epilogDir, "50-site-epilog", "site-epilog", logFile)

	t.Run("all pass", func(t *testing.T) {
		job := submitHeld(t, sl, "-N2", "-w", "n1,n3", "-J", "llmgw-site-hooks", "--wrap", "true")
		if _, err := sl.Run(ctx, "scontrol", "release", job); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "job "+job+" completed, its Epilogs done", func() bool {
			return jobField(sl, job, "JobState") == "COMPLETED"
		})
		want := []string{"site-health", "site-gpu", "prolog", "site-epilog", "epilog"}
		// The Epilog's last line may follow the job's COMPLETED by a hair
		// on a loaded machine: wait for it rather than read once.
		var order map[string][]string
		waitFor(t, 10*time.Second, "every hook's line for job "+job, func() bool {
			order = hookOrder(t, logFile, job)
			return len(order["n1"]) >= len(want) && len(order["n3"]) >= len(want)
		})
		for _, n := range []string{"n1", "n3"} {
			if !slices.Equal(order[n], want) {
				t.Errorf("on %s the hooks ran as %q, want %q", n, order[n], want)
			}
		}
		t.Logf("order on n1: %s", strings.Join(order["n1"], " → "))
	})

	t.Run("site fails on one node", func(t *testing.T) {
		job := submitHeld(t, sl, "-N2", "-w", "n1,n2", "-J", "llmgw-site-hooks-fail", "--wrap", "true")
		marker := filepath.Join(filepath.Dir(prologDir), "site-fail.site-health."+job+".n2")
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(marker)
			sl.Run(context.Background(), "scancel", job)
			sl.Run(context.Background(), "scontrol", "update", "nodename=n2", "state=resume")
			waitFor(t, 30*time.Second, "n2 back in service", func() bool {
				st := nodeField(sl, "n2", "State")
				return st == "IDLE" || st == "ALLOCATED" || st == "MIXED"
			})
		})
		if _, err := sl.Run(ctx, "scontrol", "release", job); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Minute, "n2 drained by the site's failing Prolog", func() bool {
			return strings.Contains(nodeField(sl, "n2", "State"), "DRAIN")
		})
		if r := nodeField(sl, "n2", "Reason"); !strings.Contains(r, "Prolog") {
			t.Errorf("n2's drain reason is %q, want Slurm's Prolog error", r)
		}
		waitFor(t, 30*time.Second, "job "+job+" requeued held", func() bool {
			return jobField(sl, job, "JobState") == "PENDING" && jobField(sl, job, "Reason") != "None"
		})
		t.Logf("job %s: %s, reason %s; n2: %s (%s)", job, jobField(sl, job, "JobState"), jobField(sl, job, "Reason"),
			nodeField(sl, "n2", "State"), nodeField(sl, "n2", "Reason"))
		order := hookOrder(t, logFile, job)
		// On n2 the health check failed, and the rest of the directory,
		// llmgw's hook with it, did not run; the Epilogs that follow the
		// requeue may.
		if n2 := order["n2"]; len(n2) == 0 || n2[0] != "site-health" || slices.Contains(n2, "site-gpu") || slices.Contains(n2, "prolog") {
			t.Errorf("on n2 the hooks ran as %q, want site-health and no other Prolog: after a failing script slurmd runs no more", n2)
		}
		// n1's Prolog passed, llmgw's hook last.
		if n1, want := order["n1"], []string{"site-health", "site-gpu", "prolog"}; len(n1) < 3 || !slices.Equal(n1[:3], want) {
			t.Errorf("on n1 the hooks ran as %q, want %q first", n1, want)
		}
		if strings.Contains(nodeField(sl, "n1", "State"), "DRAIN") {
			t.Errorf("n1 is drained (%s), though its Prolog passed", nodeField(sl, "n1", "Reason"))
		}
	})
}
