package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/config"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/fetch"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" means valid
	}{
		{name: "zero value is valid", cfg: Config{}},
		{name: "full", cfg: Config{Coordinator: "https://coord:8420", Node: "gpu001", Fabric: "ib-a", WeightDirs: []string{"/models"},
			CacheDir: "/var/cache/llmgw", MetricsListen: ":9482", ScanInterval: time.Minute, ReportInterval: 30 * time.Second}},
		{name: "coordinator without scheme", cfg: Config{Coordinator: "coord:8420"}, want: `coordinator "coord:8420"`},
		{name: "bad node", cfg: Config{Node: "gpu[1-2]"}, want: "node: node name"},
		{name: "bad fabric", cfg: Config{Fabric: "ib a"}, want: "fabric:"},
		{name: "relative weight dir", cfg: Config{WeightDirs: []string{"models"}}, want: `weight dir "models" is relative`},
		{name: "empty weight dir", cfg: Config{WeightDirs: []string{""}}, want: "weight dir is empty"},
		{name: "relative cache", cfg: Config{CacheDir: "cache"}, want: `cache dir "cache" is relative`},
		{name: "long socket", cfg: Config{Socket: "/" + strings.Repeat("s", 120)}, want: "shorter than 107 bytes"},
		{name: "socket dir too long for the private bind", cfg: Config{Socket: "/" + strings.Repeat("d", 95) + "/a.sock"}, want: "its directory 18 shorter"},
		{name: "metrics address", cfg: Config{MetricsListen: "9482"}, want: "metrics listen"},
		{name: "interval too short", cfg: Config{ReportInterval: 30 * time.Millisecond}, want: "report interval 30ms: must be at least 1s"},
		{name: "connections", cfg: Config{Connections: 1000}, want: "connections 1000"},
		{name: "every problem at once", cfg: Config{Fabric: "a b", ScanInterval: time.Millisecond}, want: "fabric: node name \"a b\" may contain only letters, digits, '.', '_' and '-', and must start with a letter or digit; scan interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := config.Validate(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// The hook binary's configuration cannot name the fetcher's default without
// linking the fetcher; the two spellings must agree.
func TestDefaultConnectionsIsTheFetchers(t *testing.T) {
	if DefaultConnections != fetch.DefaultConnections {
		t.Errorf("nodeconf.DefaultConnections = %d, fetch.DefaultConnections = %d", DefaultConnections, fetch.DefaultConnections)
	}
}

func TestDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.Fabric != DefaultFabric || c.CacheDir != DefaultCacheDir || c.StateDir != DefaultStateDir || c.Socket != DefaultSocket ||
		c.ReportInterval != DefaultReportInterval || c.ScanInterval != DefaultScanInterval || c.Connections != DefaultConnections {
		t.Errorf("WithDefaults() = %+v", c)
	}
	if got := scanDirs(Config{WeightDirs: []string{"/m", "/c"}, CacheDir: "/c"}); len(got) != 2 {
		t.Errorf("scanDirs with the cache among the weight dirs = %q, want it once", got)
	}
}

func TestDefaultNodeName(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "slurm.conf")
	os.WriteFile(conf, []byte("NodeName=gpu[01-04] NodeHostname=host[1-4] CPUs=8\nNodeName=n1 NodeHostname=shared\nNodeName=n2 NodeHostname=shared\n"), 0o644)
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	for _, tc := range []struct {
		name     string
		env      map[string]string
		hostname func() (string, error)
		want     string
		wantErr  string
	}{
		{name: "SLURMD_NODENAME wins", env: map[string]string{"SLURMD_NODENAME": "x9", "SLURM_CONF": conf}, hostname: host("host2"), want: "x9"},
		{name: "slurm.conf maps the hostname", env: map[string]string{"SLURM_CONF": conf}, hostname: host("host3.cluster.example"), want: "gpu03"},
		{name: "not in slurm.conf: short hostname", env: map[string]string{"SLURM_CONF": conf}, hostname: host("login1.cluster"), want: "login1"},
		{name: "no slurm.conf: short hostname", env: map[string]string{"SLURM_CONF": filepath.Join(dir, "none.conf")}, hostname: host("vm"), want: "vm"},
		{name: "ambiguous", env: map[string]string{"SLURM_CONF": conf}, hostname: host("shared"), wantErr: "pass --node NAME"},
		{name: "hostname fails", env: map[string]string{}, hostname: func() (string, error) { return "", errors.New("boom") }, wantErr: "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DefaultNodeName(func(k string) string { return tc.env[k] }, tc.hostname)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("DefaultNodeName = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("DefaultNodeName = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The hooks find the agent's socket through package config, which cannot
// link api (net/http); the two constants must stay one.
func TestDefaultSocketIsAPIs(t *testing.T) {
	if DefaultSocket != api.DefaultSocket {
		t.Errorf("config.DefaultSocket %q != api.DefaultSocket %q", DefaultSocket, api.DefaultSocket)
	}
}
