package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/spf13/pflag"
)

func TestLoadLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.toml")
	os.WriteFile(file, []byte("cache_dir = \"/file/cache\"\nrun_dir = \"/file/run\"\nfetch_deadline = \"2m\"\nstate_dir = \"/file/state\"\n"), 0o644)
	env := map[string]string{"LLMGW_RUN_DIR": "/env/run", "LLMGW_STATE_DIR": "/env/state"}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg, err := Load(fs, "prolog", []string{"--config", file, "--state-dir", "/flag/state"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if cfg.CacheDir != "/file/cache" || cfg.RunDir != "/env/run" || cfg.StateDir != "/flag/state" || cfg.FetchDeadline != 2*time.Minute ||
		cfg.GCInterval != DefaultGCInterval || cfg.Socket != DefaultSocket {
		t.Errorf("layered config = %+v", cfg)
	}
	if cfg.CatalogCopyPath() != "/flag/state/catalog.json" || cfg.LockDir() != "/env/run/locks" {
		t.Errorf("paths: %s %s", cfg.CatalogCopyPath(), cfg.LockDir())
	}
	if (Agent{}).WithDefaults().LockDir() != "" {
		t.Error("the default run dir should leave the lock dir to the fetcher's default")
	}

	// A misspelt key, a bad flag and a bad value are each said.
	os.WriteFile(file, []byte("run_dri = \"/x\"\n"), 0o644)
	if _, err := Load(pflag.NewFlagSet("t", pflag.ContinueOnError), "prolog", []string{"--config", file}, os.Getenv); err == nil || !strings.Contains(err.Error(), "unknown key run_dri") {
		t.Errorf("unknown key: %v", err)
	}
	var ae *ArgError
	if _, err := Load(pflag.NewFlagSet("t", pflag.ContinueOnError), "prolog", []string{"--cache-dri", "/x"}, func(string) string { return "" }); !errors.As(err, &ae) {
		t.Errorf("unknown flag: %v, want an *ArgError", err)
	}
	if _, err := Load(pflag.NewFlagSet("t", pflag.ContinueOnError), "prolog", []string{"--fetch-deadline", "10ms"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "fetch deadline 10ms") {
		t.Errorf("short deadline: %v", err)
	}
	// The built-in default file may be absent; a named one may not.
	if _, err := Load(pflag.NewFlagSet("t", pflag.ContinueOnError), "prolog", nil, func(k string) string {
		if k == "LLMGW_CONFIG" {
			return filepath.Join(dir, "none.toml")
		}
		return ""
	}); err == nil {
		t.Error("LLMGW_CONFIG naming a missing file: no error")
	}
}

// TestSettingEnv holds nodeconf.SettingEnv, which the hook binary reads to
// know when only llmgw's loader will do, equal to the variables ApplyEnv
// applies.
func TestSettingEnv(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("config", "", "")
	var cfg Agent
	Flags(fs, &cfg)
	var want []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !notSettings[f.Name] {
			want = append(want, EnvName(f.Name))
		}
	})
	slices.Sort(want)
	if got := slices.Sorted(slices.Values(nodeconf.SettingEnv)); !slices.Equal(got, want) {
		t.Errorf("nodeconf.SettingEnv = %q\nApplyEnv applies %q", got, want)
	}
}
