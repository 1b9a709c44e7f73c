package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSlurmctldDown: the demo tells a dev cluster that is down from its pid
// file at once, instead of waiting out sinfo's timeout, and leaves every
// case it cannot be sure of to sinfo.
func TestSlurmctldDown(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A process that is not slurmctld: this test.
	self := write("self.pid", strconv.Itoa(os.Getpid())+"\n")
	// A pid no process has: a child that has exited and been reaped.
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	gone := write("gone.pid", strconv.Itoa(child.Process.Pid)+"\n")
	for _, tc := range []struct {
		name, conf, want string
	}{
		{"no pid file", write("a.conf", "ClusterName=llmgw-dev\nSlurmctldPidFile="+filepath.Join(dir, "none.pid")+"\n"), "no " + filepath.Join(dir, "none.pid")},
		{"not slurmctld", write("b.conf", "SlurmctldPidFile="+self+"\n"), "is not running"},
		{"exited", write("c.conf", "SlurmctldPidFile="+gone+"\n"), "is not running"},
		{"no SlurmctldPidFile: ask sinfo", write("d.conf", "ClusterName=llmgw-dev\n"), ""},
		{"garbage in the pid file: ask sinfo", write("e.conf", "SlurmctldPidFile="+write("junk.pid", "x\n")+"\n"), ""},
		{"no slurm.conf: ask sinfo", filepath.Join(dir, "missing.conf"), ""},
	} {
		got := slurmctldDown(tc.conf)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: slurmctldDown = %q, want %q", tc.name, got, tc.want)
		}
	}
}
