package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestConfigPath(t *testing.T) {
	noEnv := func(string) string { return "" }
	withEnv := func(k string) string {
		if k == "LLMGW_CONFIG" {
			return "/env.toml"
		}
		return ""
	}
	for _, tc := range []struct {
		name         string
		args         []string
		getenv       func(string) string
		want         string
		wantExplicit bool
	}{
		{"default", []string{"--node", "n1"}, noEnv, "/etc/x.toml", false},
		{"flag with space", []string{"--config", "/a.toml"}, withEnv, "/a.toml", true},
		{"flag with equals", []string{"--once", "--config=/b.toml"}, withEnv, "/b.toml", true},
		{"environment", nil, withEnv, "/env.toml", true},
		{"after --", []string{"--", "--config", "/c.toml"}, noEnv, "/etc/x.toml", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, explicit := configPath(tc.args, tc.getenv, "/etc/x.toml")
			if got != tc.want || explicit != tc.wantExplicit {
				t.Errorf("configPath(%q) = %q, %v; want %q, %v", tc.args, got, explicit, tc.want, tc.wantExplicit)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cacheDir := fs.String("cache-dir", "/default", "")
	node := fs.String("node", "", "")
	once := fs.Bool("once", false, "")
	sum := fs.String("sha256", "", "")
	n := fs.Int("connections", 8, "")
	if err := fs.Parse([]string{"--node", "flag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"LLMGW_CACHE_DIR": "/from-env",
		"LLMGW_NODE":      "env", // the flag was given: the flag wins
		"LLMGW_ONCE":      "true",
		"LLMGW_SHA256":    "00",
	}
	if err := applyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if *cacheDir != "/from-env" || *node != "flag" || *once || *sum != "" || *n != 8 {
		t.Errorf("after applyEnv: cache-dir=%q node=%q once=%v sha256=%q connections=%d; want /from-env, flag, false, \"\", 8", *cacheDir, *node, *once, *sum, *n)
	}

	env = map[string]string{"LLMGW_CONNECTIONS": "eight"}
	err := applyEnv(fs, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "LLMGW_CONNECTIONS") {
		t.Errorf("applyEnv with a bad value = %v, want an error naming LLMGW_CONNECTIONS", err)
	}
}

func TestDecodeTOML(t *testing.T) {
	dir := t.TempDir()
	var cfg struct {
		CacheDir string `toml:"cache_dir"`
	}
	if err := decodeTOML("agent", filepath.Join(dir, "absent.toml"), false, &cfg); err != nil {
		t.Errorf("a missing default file is not an error, got %v", err)
	}
	if err := decodeTOML("agent", filepath.Join(dir, "absent.toml"), true, &cfg); err == nil {
		t.Error("a missing file named by --config must be an error")
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("cache_dir = \"/c\"\ncahce_dir = \"/typo\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := decodeTOML("agent", bad, true, &cfg)
	if err == nil || !strings.Contains(err.Error(), "cahce_dir") || !strings.Contains(err.Error(), "llmgw agent --help") {
		t.Errorf("decodeTOML with an unknown key = %v, want an error naming cahce_dir and the help to check", err)
	}
}
