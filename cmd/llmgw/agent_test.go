package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// agentTestEnv is an environment and a config file whose paths are all in
// t.TempDir(), so no test reads /etc/llmgw or writes /var.
func agentTestEnv(t *testing.T, toml string) (map[string]string, string) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "agent.toml")
	base := "cache_dir = " + quote(filepath.Join(dir, "cache")) + "\nstate_dir = " + quote(filepath.Join(dir, "state")) + "\n"
	if err := os.WriteFile(conf, []byte(base+toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"LLMGW_CONFIG": conf}, dir
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestAgentConfigUnknownKey(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(conf, []byte("node = \"n1\"\nweight_dir = [\"/models\"]\n"), 0o644)
	code, out, stderr := llmgwRun(t, nil, "agent", "--config", conf, "--once")
	if code != 1 || !strings.Contains(stderr, "unknown key weight_dir") || !strings.Contains(stderr, conf) {
		t.Errorf("exit %d, stderr %q; want 1 and the unknown key named with the file", code, stderr)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	os.WriteFile(conf, []byte("node = \n"), 0o644)
	if code, _, stderr := llmgwRun(t, nil, "agent", "--config", conf, "--once"); code != 1 || !strings.Contains(stderr, "line 1") {
		t.Errorf("broken TOML: exit %d, stderr %q; want 1 with the position", code, stderr)
	}
	if code, _, stderr := llmgwRun(t, nil, "agent", "--config", filepath.Join(t.TempDir(), "none.toml"), "--once"); code != 1 || !strings.Contains(stderr, "none.toml") {
		t.Errorf("missing explicit config: exit %d, stderr %q", code, stderr)
	}
}

func TestAgentOnceNoCoordinator(t *testing.T) {
	environ, dir := agentTestEnv(t, "")
	w := filepath.Join(dir, "w")
	os.MkdirAll(w, 0o755)
	os.WriteFile(filepath.Join(w, "m.gguf"), make([]byte, 4096), 0o644)
	code, out, stderr := llmgwRun(t, environ, "agent", "--once", "--weights-dir", w, "--node", "n1", "--fabric", "ib-a")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var r api.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("stdout is not a report: %v\n%s", err, out)
	}
	if r.Node != "n1" || r.Fabric != "ib-a" || !r.Looked || len(r.Weights) != 1 || r.Weights[0].Size != 4096 || r.AgentVersion != version {
		t.Errorf("report = %+v", r)
	}
	if !strings.Contains(stderr, "not sent: no coordinator configured") {
		t.Errorf("stderr %q does not say why the report was not sent", stderr)
	}
}

// TestAgentConfigLayers checks flags over LLMGW_* over the file.
func TestAgentConfigLayers(t *testing.T) {
	environ, dir := agentTestEnv(t, "node = \"from-file\"\nfabric = \"file-f\"\nscan_interval = \"2m\"\nreport_interval = \"45s\"\nweight_dirs = [\""+t.TempDir()+"\"]\n")
	fabric := func(env map[string]string, args ...string) (string, string) {
		t.Helper()
		code, out, stderr := llmgwRun(t, env, append([]string{"agent", "--once"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var r api.Report
		json.Unmarshal([]byte(out), &r)
		if !r.Looked {
			t.Errorf("weight_dirs from the file were lost: %+v", r)
		}
		return r.Node, r.Fabric
	}
	if n, f := fabric(environ); n != "from-file" || f != "file-f" {
		t.Errorf("file only: node %q fabric %q", n, f)
	}
	environ["LLMGW_FABRIC"] = "env-f"
	if _, f := fabric(environ); f != "env-f" {
		t.Errorf("env over file: fabric %q", f)
	}
	if _, f := fabric(environ, "--fabric", "flag-f"); f != "flag-f" {
		t.Errorf("flag over env: fabric %q", f)
	}
	environ["LLMGW_FABRIC"] = "bad fabric"
	if code, _, stderr := llmgwRun(t, environ, "agent", "--once"); code != 1 || !strings.Contains(stderr, "fabric") {
		t.Errorf("bad fabric from env: exit %d, %q", code, stderr)
	}
	_ = dir
}

func TestAgentOnceCoordinator(t *testing.T) {
	var got api.Report
	coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/reports":
			json.NewDecoder(r.Body).Decode(&got)
			w.WriteHeader(http.StatusNoContent)
		case "/v1/models":
			json.NewEncoder(w).Encode(api.Models{Models: []api.Model{{Name: "m", Source: "/m.gguf"}}})
		}
	}))
	defer coord.Close()
	environ, dir := agentTestEnv(t, "")
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("t0k\n"), 0o600)

	code, out, stderr := llmgwRun(t, environ, "agent", "--once", "--node", "n1", "--coordinator", coord.URL, "--token-file", tok)
	if code != 0 || !strings.Contains(stderr, "report 1 sent to "+coord.URL) || got.Node != "n1" || got.Looked {
		t.Errorf("exit %d, stderr %q, coordinator got %+v", code, stderr, got)
	}
	if !strings.Contains(out, `"looked": false`) {
		t.Errorf("stdout lacks the report: %s", out)
	}

	// A coordinator that refuses connections: the report is still printed,
	// and the exit status says it was not delivered.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	code, out, stderr = llmgwRun(t, environ, "agent", "--once", "--node", "n1", "--coordinator", refused, "--token-file", tok)
	if code != 1 || !strings.Contains(stderr, "report not sent") || !strings.Contains(stderr, "connection refused") {
		t.Errorf("refused: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, `"node": "n1"`) {
		t.Errorf("refused: stdout lacks the report: %s", out)
	}
}

func TestAgentUsage(t *testing.T) {
	environ, _ := agentTestEnv(t, "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--no-such-flag"}, 2, "unknown flag"},
		{[]string{"--once", "/models"}, 2, "--weights-dir"},
		{[]string{"--once", "--scan-interval", "soon"}, 2, "scan-interval"},
		{[]string{"--once", "--coordinator", "coord:8420"}, 1, "want a URL like http://coord:8420"},
	} {
		code, _, stderr := llmgwRun(t, environ, append([]string{"agent"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("agent %q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	code, out, _ := llmgwRun(t, environ, "agent", "--help")
	if code != 0 || !strings.Contains(out, "--weights-dir") || !strings.Contains(out, "Usage: llmgw agent") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
}

// TestAgentGPUMemory: the report carries the GPU memory from the config
// file, a flag over it, and unknown (0, no error) without nvidia-smi.
func TestAgentGPUMemory(t *testing.T) {
	for _, tc := range []struct {
		toml string
		args []string
		want int64
	}{
		{"gpu_memory = 80000000000\n", nil, 80e9},
		{"gpu_memory = 80000000000\n", []string{"--gpu-memory", "640G"}, 640e9},
		{"", []string{"--gpu-memory", "1GiB"}, 1 << 30},
		{"nvidia_smi = \"/nonexistent/nvidia-smi\"\n", nil, 0},
	} {
		environ, _ := agentTestEnv(t, tc.toml)
		code, out, stderr := llmgwRun(t, environ, append([]string{"agent", "--once", "--node", "n1"}, tc.args...)...)
		var r api.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("%q %v: exit %d, %s", tc.toml, tc.args, code, stderr)
		}
		if r.GPUMemory != tc.want || len(r.Errors) != 0 {
			t.Errorf("%q %v: gpu memory %d, errors %v; want %d", tc.toml, tc.args, r.GPUMemory, r.Errors, tc.want)
		}
	}
	environ, _ := agentTestEnv(t, "gpu_memory = -1\n")
	if code, _, stderr := llmgwRun(t, environ, "agent", "--once", "--node", "n1"); code == 0 || !strings.Contains(stderr, "gpu memory -1") {
		t.Errorf("negative gpu_memory: exit %d, %s", code, stderr)
	}
}
