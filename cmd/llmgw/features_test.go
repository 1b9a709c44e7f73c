package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
)

func TestFeaturesCommand(t *testing.T) {
	// Reconciler off: the command says how to turn it on.
	url, _, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	code, _, errs := llmgwRun(t, admin, "features", "--dry-run")
	if code != 1 || !strings.Contains(errs, "--features") {
		t.Errorf("features with the reconciler off: exit %d, %q", code, errs)
	}
	code, _, errs = llmgwRun(t, admin, "features", "now")
	if code != 2 || !strings.Contains(errs, "takes no arguments") {
		t.Errorf("features now: exit %d, %q", code, errs)
	}

	// Reconciler on, Slurm's sinfo missing: exit 1 naming it.
	dir := t.TempDir()
	cfg := coordinator.Config{AdminTokenFile: adminTok, Features: true, Sinfo: filepath.Join(dir, "sinfo"),
		FeatureFile: filepath.Join(dir, "features")}
	tokens, err := cfg.LoadTokens()
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(context.Background(), cfg, tokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	code, _, errs = llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": ts.URL, "LLMGW_TOKEN_FILE": adminTok}, "features", "--dry-run")
	if code != 1 || !strings.Contains(errs, "reading Slurm's nodes") || !strings.Contains(errs, filepath.Join(dir, "sinfo")) {
		t.Errorf("features with no sinfo: exit %d, %q", code, errs)
	}
	// LLMGW_DRY_RUN is not a setting: it must not turn a real run into a dry one.
	fs := pflag.NewFlagSet("features", pflag.ContinueOnError)
	dry := fs.Bool("dry-run", false, "")
	if err := config.ApplyEnv(fs, func(k string) string { return map[string]string{"LLMGW_DRY_RUN": "true"}[k] }); err != nil || *dry {
		t.Errorf("LLMGW_DRY_RUN=true set --dry-run (%v)", err)
	}
}

func TestCoordinatorFeatureConfig(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "coordinator.toml")
	os.WriteFile(conf, []byte("features = true\nfeature_interval = \"5s\"\nfeature_file = \"/tmp/f\"\n"+
		"sinfo = \"/usr/bin/sinfo\"\nslurm_conf = \"/etc/slurm/slurm.conf\"\nscontrol = \"scontrol\"\n"), 0o644)
	// Every key is known (an unknown one exits 1 naming it); the relative
	// scontrol is refused before anything starts.
	code, _, errs := llmgwRun(t, map[string]string{}, "coordinator", "--config", conf)
	if code != 2 || !strings.Contains(errs, `--scontrol "scontrol" is not an absolute path`) {
		t.Errorf("relative scontrol: exit %d, %q", code, errs)
	}
	code, out, _ := llmgwRun(t, map[string]string{}, "coordinator", "--config", conf, "--help")
	if code != 0 || !strings.Contains(out, "--feature-interval duration") || !strings.Contains(out, `(default 5s)`) {
		t.Errorf("coordinator --help with the config: exit %d:\n%s", code, out)
	}
	code, out, _ = llmgwRun(t, map[string]string{}, "help")
	if code != 0 || !strings.Contains(out, "features  ") {
		t.Errorf("llmgw help does not list features:\n%s", out)
	}
}
