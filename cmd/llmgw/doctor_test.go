package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorCmd runs llmgw doctor on a slurm.conf without llmgw's settings
// and a broken agent.toml: it must say so with fixes and exit 1, and --json
// must carry the same findings.
func TestDoctorCmd(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	os.WriteFile(conf, []byte("ClusterName=x\nPrologFlags=Contain\n"), 0o644)
	cfg := filepath.Join(dir, "agent.toml")
	os.WriteFile(cfg, []byte("cache_dirr = \"/x\"\n"), 0o644)
	environ := map[string]string{"SLURM_CONF": conf}
	args := []string{"doctor", "--config", cfg, "--socket", filepath.Join(dir, "a.sock"), "--cache-dir", dir}

	code, out, stderr := llmgwRun(t, environ, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
	}
	squeezed := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"OK PrologFlags",
		"ERROR Prolog Prolog is not set",
		"fix: link /usr/libexec/llmgw/prolog into the prolog directory slurm.conf globs",
		"ERROR agent config config " + cfg + ": unknown key cache_dirr",
		"OK cache dir",
	} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr, "would break jobs") {
		t.Errorf("stderr: %s", stderr)
	}

	code, out, _ = llmgwRun(t, environ, append(args, "--json")...)
	var fs []struct{ Check, Severity, Message, Fix string }
	if err := json.Unmarshal([]byte(out), &fs); err != nil || code != 1 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	sev := map[string]string{}
	for _, f := range fs {
		sev[f.Check] = f.Severity
	}
	if sev["Prolog"] != "error" || sev["PrologFlags"] != "ok" || sev["job_submit"] != "warn" {
		t.Errorf("--json severities %v", sev)
	}
}
