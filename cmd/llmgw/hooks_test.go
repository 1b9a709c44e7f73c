package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The hooks exit 0 on their own errors (a Prolog or Epilog that fails
// drains the node); the TaskProlog fails the job, on purpose, when its
// weights cannot be had.
func TestHooksExitStatus(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	conf := filepath.Join(dir, "agent.toml")
	os.WriteFile(conf, []byte("run_dir = \""+run+"\"\nstate_dir = \""+dir+"/state\"\ncache_dir = \""+dir+"/cache\"\nsocket = \""+run+"/agent.sock\"\n"), 0o644)
	job := map[string]string{"SLURM_JOB_ID": "31", "SLURMD_NODENAME": "n1", "SLURM_JOB_COMMENT": "llmgw:model=m"}

	// No catalog copy, no coordinator, no agent: recorded, logged, exit 0.
	code, out, stderr := llmgwRun(t, job, "prolog", "--config", conf)
	if code != 0 || out != "" || !strings.Contains(stderr, "job 31") {
		t.Errorf("prolog without a catalog: exit %d, stdout %q, stderr %q; want 0, nothing, the failure logged", code, out, stderr)
	}
	rec, err := catalog.ReadJobRecord(run, "31")
	if err != nil || !strings.Contains(rec.Error, "weights for model m could not be had on n1") {
		t.Errorf("record = %+v, %v", rec, err)
	}
	code, out, _ = llmgwRun(t, job, "task-prolog", "--config", conf)
	if code != 1 || !strings.HasPrefix(out, "print llmgw: weights for model m") {
		t.Errorf("task-prolog after a failure: exit %d, stdout %q; want 1 and a print line", code, out)
	}
	if code, _, _ := llmgwRun(t, job, "epilog", "--config", conf); code != 0 {
		t.Errorf("epilog: exit %d", code)
	}
	if _, err := catalog.ReadJobRecord(run, "31"); !os.IsNotExist(err) {
		t.Errorf("record after the epilog: %v", err)
	}
	// A configuration that cannot be read: still 0 for the Prolog and Epilog.
	for _, hook := range []string{"prolog", "epilog"} {
		if code, _, stderr := llmgwRun(t, job, hook, "--config", filepath.Join(dir, "none.toml")); code != 0 || !strings.Contains(stderr, "none.toml") {
			t.Errorf("%s with a missing config: exit %d, stderr %q; want 0 and the file named", hook, code, stderr)
		}
	}
}
