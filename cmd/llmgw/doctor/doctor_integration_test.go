//go:build integration

package doctor

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// These tests run the doctor against the dev cluster as scripts/test-package
// leaves it: the llmgw package installed, the cluster's slurm.conf pointing
// at the installed hooks, plugstack line and job_submit.lua, agent and
// coordinator running. They break one setting at a time and check the
// doctor names it.

func clusterConf(t *testing.T) string {
	t.Helper()
	if os.Getenv("LLMGW_DOCTOR_CLUSTER") == "" {
		t.Skip("needs the dev cluster on the installed package; scripts/test-package runs this with LLMGW_DOCTOR_CLUSTER=1")
	}
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		t.Fatal("LLMGW_DOCTOR_CLUSTER is set but SLURM_CONF is not")
	}
	return conf
}

// edit returns slurm.conf text with key's line replaced by key=val, or
// removed when val is "".
func edit(t *testing.T, conf []byte, key, val string) []byte {
	t.Helper()
	re := regexp.MustCompile(`(?mi)^` + key + `=.*\n`)
	line := ""
	if val != "" {
		line = key + "=" + val + "\n"
	}
	if re.Match(conf) {
		return re.ReplaceAll(conf, []byte(line))
	}
	return append(append([]byte{}, conf...), line...)
}

func clusterOpts(conf string) Options {
	return Options{
		Runner:      &slurm.Runner{},
		SlurmConf:   conf,
		Socket:      "/run/llmgw/agent.sock",
		CacheDir:    "/var/cache/llmgw",
		Coordinator: os.Getenv("LLMGW_COORDINATOR"),
		// test-package installs n1's own token here (llmgw nodes token).
		TokenFile:     "/etc/llmgw/node.token",
		FetchDeadline: 30 * time.Minute,
	}
}

// TestDoctorOnCluster: the cluster as installed passes; a copy of its
// slurm.conf with one setting broken (SLURM_CONF pointed at the copy, the
// controller unchanged) fails on exactly that setting, and says that the
// file and the running controller differ.
func TestDoctorOnCluster(t *testing.T) {
	conf := clusterConf(t)
	good, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	fs := Run(context.Background(), clusterOpts(conf))
	for _, f := range fs {
		if f.Severity != OK {
			t.Errorf("the installed setup: %s %s: %s", f.Severity, f.Check, f.Message)
		}
	}

	empty := filepath.Join(t.TempDir(), "plugstack.conf")
	os.WriteFile(empty, []byte("# no plugins\n"), 0o644)
	cases := []struct {
		key, val string
		check    string
		want     Severity
		say      string
	}{
		{"PrologFlags", "", "PrologFlags", Error, "no Alloc"},
		{"PrologFlags", "Contain", "PrologFlags", OK, ""},
		{"Prolog", "/nonexistent/prolog", "Prolog", Error, "drains the node"},
		{"Prolog", "/bin/true", "Prolog", Error, "does not run llmgw's prolog"},
		{"Epilog", "", "Epilog", Error, "not set"},
		{"TaskProlog", "", "TaskProlog", Error, "not set"},
		{"PrologEpilogTimeout", "60", "PrologEpilogTimeout", Error, "below the fetch deadline"},
		{"PrologEpilogTimeout", "1860", "PrologEpilogTimeout", OK, ""},
		{"PlugStackConfig", empty, "SPANK plugin", Error, "does not load llmgw_spank.so"},
		{"JobSubmitPlugins", "", "job_submit", Warn, "not enabled"},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.val, func(t *testing.T) {
			broken := filepath.Join(t.TempDir(), "slurm.conf")
			if err := os.WriteFile(broken, edit(t, good, tc.key, tc.val), 0o644); err != nil {
				t.Fatal(err)
			}
			o := clusterOpts(broken)
			// scontrol still asks the running controller, which runs the
			// good file: the live side stays right.
			o.Runner = &slurm.Runner{Env: []string{"SLURM_CONF=" + conf}}
			fs := Run(context.Background(), o)
			sev, msgs := worst(fs, tc.check)
			if sev != tc.want || !strings.Contains(msgs, tc.say) {
				t.Fatalf("%s: %s %q; want %s with %q", tc.check, sev, msgs, tc.want, tc.say)
			}
			if tc.want == OK {
				return
			}
			if !strings.Contains(msgs, broken) {
				t.Errorf("%s: %q does not name the broken file", tc.check, msgs)
			}
			if _, d := worst(fs, "running config"); !strings.Contains(d, tc.key+" is") {
				t.Errorf("no finding says the file's %s differs from the running slurmctld's: %q", tc.key, d)
			}
			if Broken(fs) != (tc.want == Error) {
				t.Errorf("Broken = %v with %s", Broken(fs), tc.want)
			}
		})
	}
}

// TestDoctorOnBrokenController restarts the cluster's slurmctld on a broken
// copy of slurm.conf, so that the running configuration (scontrol show
// config) is the broken one while the file is right, and puts the good one
// back afterwards.
func TestDoctorOnBrokenController(t *testing.T) {
	conf := clusterConf(t)
	good, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	settings, err := slurm.ReadConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	pidFile, _ := settings.Get("SlurmctldPidFile")
	b := edit(t, good, "PrologFlags", "")
	b = edit(t, b, "JobSubmitPlugins", "")
	b = edit(t, b, "PrologEpilogTimeout", "60")
	// Beside the real one: scripts/dev-cluster down recognises the cluster's
	// daemons by their state directory in the command line.
	broken := filepath.Join(filepath.Dir(conf), "doctor-broken.conf")
	if err := os.WriteFile(broken, b, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(broken)

	restartCtld(t, pidFile, broken)
	defer func() {
		restartCtld(t, pidFile, conf)
		waitIdle(t)
	}()
	// The controller answers with what it read.
	var live slurm.Config
	for i := 0; i < 100; i++ {
		if live, err = (&slurm.Runner{}).ShowConfig(context.Background()); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _ := live.Get("PrologEpilogTimeout"); v != "60" {
		t.Fatalf("slurmctld on %s shows PrologEpilogTimeout=%q (%v)", broken, v, err)
	}

	fs := Run(context.Background(), clusterOpts(conf))
	for _, want := range []struct {
		check string
		sev   Severity
		say   string
	}{
		{"PrologFlags", Error, "no Alloc in the running slurmctld"},
		{"PrologEpilogTimeout", Error, "PrologEpilogTimeout=60 in the running slurmctld"},
		{"job_submit", Warn, "not enabled in the running slurmctld"},
	} {
		if sev, msgs := worst(fs, want.check); sev != want.sev || !strings.Contains(msgs, want.say) {
			t.Errorf("%s: %s %q; want %s with %q", want.check, sev, msgs, want.sev, want.say)
		}
	}
	if !Broken(fs) {
		t.Error("a controller without PrologFlags=Alloc is not Broken")
	}
}

// restartCtld stops the slurmctld whose PID file is pidFile and starts one
// on conf.
func restartCtld(t *testing.T, pidFile, conf string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("slurmctld PID file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("slurmctld PID file %s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop slurmctld %d: %v", pid, err)
	}
	for i := 0; i < 200; i++ {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.Remove(pidFile)
	if out, err := exec.Command("/usr/sbin/slurmctld", "-f", conf).CombinedOutput(); err != nil {
		t.Fatalf("slurmctld -f %s: %v: %s", conf, err, out)
	}
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(pidFile); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("slurmctld -f %s wrote no PID file", conf)
}

// waitIdle waits for the four nodes to be idle again after a controller
// restart, so the tests after this one find the cluster as they expect.
func waitIdle(t *testing.T) {
	t.Helper()
	r := &slurm.Runner{}
	for i := 0; i < 300; i++ {
		nodes, err := r.Nodes(context.Background())
		idle := 0
		for _, n := range nodes {
			if n.State == "idle" {
				idle++
			}
		}
		if err == nil && idle == len(nodes) && idle > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Error("the nodes are not idle 30 s after slurmctld was restarted on the good slurm.conf")
}

// TestCacheOnSharedFS mounts a FUSE filesystem (bindfs), which statfs
// reports as shared, and puts the cache there: the doctor must refuse it,
// since the fetch lock is node-local. Needs root and bindfs (make
// integration installs it); no cluster.
func TestCacheOnSharedFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root: run 'sudo make integration'")
	}
	if _, err := exec.LookPath("bindfs"); err != nil {
		t.Skip("bindfs not installed: apt-get install bindfs fuse3 (scripts/test-integration does)")
	}
	src, mnt := t.TempDir(), t.TempDir()
	cmd := exec.Command("bindfs", "-f", src, mnt)
	if err := cmd.Start(); err != nil {
		t.Fatalf("bindfs: %v", err)
	}
	t.Cleanup(func() {
		if err := exec.Command("fusermount", "-u", mnt).Run(); err != nil {
			exec.Command("umount", "-l", mnt).Run()
		}
		cmd.Wait()
	})
	// bindfs -f mounts in the background: wait until the kernel lists the
	// mount (a slow start under load must not look like a doctor bug).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(" "+mnt+" ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bindfs did not mount %s within 20 s", mnt)
		}
	}
	sev, msg := worst(checkCache(context.Background(), Options{CacheDir: mnt, Timeout: 5 * time.Second}), "cache dir")
	if sev != Error || !strings.Contains(msg, "shared filesystem (fuse)") || !strings.Contains(msg, "node-local") {
		t.Errorf("cache on FUSE: %s %q; want an error saying it is shared and the lock node-local", sev, msg)
	}
}
