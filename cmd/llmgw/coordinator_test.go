package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
)

// testCoordinator serves a real coordinator over a database file in a temp
// dir and returns its URL, the maker of nodes' token files, and the admin
// token file.
func testCoordinator(t *testing.T) (url string, nodeTok func(node string) string, adminTok string) {
	t.Helper()
	return testCoordinatorWith(t, nil)
}

// testCoordinatorWith is testCoordinator with edit applied to the
// coordinator's configuration first (nil: none). nodeTok(NODE) is the file
// of NODE's own token, made once by `llmgw nodes token NODE --out FILE`
// with the admin token, as an admin installs it on the node.
func testCoordinatorWith(t *testing.T, edit func(*coordinator.Config)) (url string, nodeTok func(node string) string, adminTok string) {
	t.Helper()
	dir := t.TempDir()
	adminTok = filepath.Join(dir, "admin.token")
	os.WriteFile(adminTok, []byte("admin-secret\n"), 0o600)
	cfg := coordinator.Config{AdminTokenFile: adminTok}
	if edit != nil {
		edit(&cfg)
	}
	tokens, err := cfg.LoadTokens()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(ctx, cfg, tokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	var mu sync.Mutex
	made := map[string]string{}
	nodeTok = func(node string) string {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if f, ok := made[node]; ok {
			return f
		}
		f := filepath.Join(dir, node+".token")
		env := map[string]string{"LLMGW_COORDINATOR": ts.URL, "LLMGW_TOKEN_FILE": adminTok}
		if code, _, errs := llmgwRun(t, env, "nodes", "token", node, "--out", f); code != 0 {
			t.Fatalf("nodes token %s: exit %d: %s", node, code, errs)
		}
		made[node] = f
		return f
	}
	return ts.URL, nodeTok, adminTok
}

// TestCoordinatorEndToEnd drives the catalog and status commands against a
// real coordinator, with a report from the real agent (`llmgw agent --once`).
func TestCoordinatorEndToEnd(t *testing.T) {
	url, nodeTok, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	anon := map[string]string{"LLMGW_COORDINATOR": url}

	weightsDir := t.TempDir()
	model := filepath.Join(weightsDir, "tiny.gguf")
	os.WriteFile(model, []byte("GGUF weights, 24 bytes.."), 0o644) // a GGUF header's length: the scan reads it
	settled := time.Now().Add(-time.Minute)                        // and takes a file modified within seconds as still being written
	os.Chtimes(model, settled, settled)

	if code, out, errs := llmgwRun(t, admin, "models", "add", "tiny", model, "--size", "24"); code != 0 || !strings.Contains(out, "tiny -> "+model) {
		t.Fatalf("models add: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "fetched", "hf:org/repo/model.gguf", "--size", "7.5GB"); code != 0 {
		t.Fatalf("models add fetched: exit %d, %q", code, errs)
	}
	if code, _, errs := llmgwRun(t, anon, "models", "add", "x", "/x"); code != 1 || !strings.Contains(errs, "needs a bearer token") {
		t.Errorf("models add without a token: exit %d, %q", code, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "bad,name", "/x"); code != 2 || !strings.Contains(errs, "Slurm feature") {
		t.Errorf("models add bad,name: exit %d, %q", code, errs)
	}
	code, out, _ := llmgwRun(t, anon, "models", "list")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "fetched hf:org/repo/model.gguf 7.5 GB") {
		t.Errorf("models list: exit %d:\n%s", code, out)
	}
	code, out, _ = llmgwRun(t, anon, "models", "list", "--json")
	var models api.Models
	if code != 0 || json.Unmarshal([]byte(out), &models) != nil || len(models.Models) != 2 {
		t.Errorf("models list --json: exit %d:\n%s", code, out)
	}

	// The real agent reports once.
	stateDir := t.TempDir()
	agentEnv := map[string]string{}
	code, _, errs := llmgwRun(t, agentEnv, "agent", "--once", "--node", "gpu01", "--fabric", "ib-a",
		"--coordinator", url, "--token-file", nodeTok("gpu01"), "--weights-dir", weightsDir,
		"--cache-dir", filepath.Join(stateDir, "cache"), "--state-dir", stateDir, "--socket", filepath.Join(stateDir, "s"))
	if code != 0 {
		t.Fatalf("agent --once: exit %d: %s", code, errs)
	}

	code, out, errs = llmgwRun(t, anon, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"MODEL    FABRIC  SERVE  HOLDERS",
		"tiny     ib-a    local  local on 1 node",
		"fetched  ib-a    none   a job fetches 7.5 GB",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = llmgwRun(t, anon, "status", "tiny")
	if code != 0 || !strings.Contains(out, "gpu01") || !strings.Contains(out, model) {
		t.Errorf("status tiny: exit %d:\n%s", code, out)
	}
	code, out, _ = llmgwRun(t, anon, "status", "--json")
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Nodes.OK != 1 || st.Models[1].Fabrics[0].Holders != "gpu01" {
		t.Errorf("status --json: exit %d:\n%s", code, out)
	}

	if code, out, _ := llmgwRun(t, admin, "models", "rm", "tiny"); code != 0 || !strings.Contains(out, "removed tiny") {
		t.Errorf("models rm: exit %d, %q", code, out)
	}
	if code, _, errs := llmgwRun(t, anon, "status", "tiny"); code != 1 || !strings.Contains(errs, "not in the catalog") {
		t.Errorf("status of a removed model: exit %d, %q", code, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "rm", "tiny"); code != 1 || !strings.Contains(errs, "404") {
		t.Errorf("models rm twice: exit %d, %q", code, errs)
	}
}

func TestClientUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no coordinator", []string{"status"}, "LLMGW_COORDINATOR"},
		{"status two models", []string{"status", "a", "b", "--coordinator", "http://127.0.0.1:1"}, "at most one MODEL"},
		{"models no subcommand", []string{"models"}, "add, rm, repin or list"},
		{"models unknown subcommand", []string{"models", "del", "x"}, "unknown models subcommand"},
		{"models add one arg", []string{"models", "add", "x"}, "NAME SOURCE"},
		{"models rm --size", []string{"models", "rm", "x", "--size", "5"}, "only to add"},
		{"bad size", []string{"models", "add", "x", "/x", "--size", "lots"}, "not a byte count"},
		{"coordinator argument", []string{"coordinator", "extra"}, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := llmgwRun(t, map[string]string{"LLMGW_CONFIG": filepath.Join(t.TempDir(), "none.toml")}, tc.args...)
			if tc.name == "coordinator argument" {
				// An explicit LLMGW_CONFIG that does not exist is an error
				// before the arguments are looked at; use no config at all.
				code, _, errs = llmgwRun(t, map[string]string{}, tc.args...)
			}
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("llmgw %v: exit %d, %q; want 2 and %q", tc.args, code, errs, tc.want)
			}
		})
	}
}

func TestCoordinatorConfig(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "coordinator.toml")
	os.WriteFile(conf, []byte("listen = \"127.0.0.1:0\"\nreport_intervall = \"10s\"\n"), 0o644)
	code, _, errs := llmgwRun(t, map[string]string{}, "coordinator", "--config", conf)
	if code != 1 || !strings.Contains(errs, "unknown key report_intervall") {
		t.Errorf("unknown key: exit %d, %q", code, errs)
	}
	code, out, _ := llmgwRun(t, map[string]string{}, "coordinator", "--help")
	if code != 0 || strings.Contains(out, "--agent-token-file") || !strings.Contains(out, "--read-token-file") {
		t.Errorf("coordinator --help: exit %d:\n%s", code, out)
	}
	// The one agent token every node shared is gone: a file, a flag or an
	// environment variable that still sets it stops the start, naming the
	// setting and what replaces it, rather than starting a coordinator
	// that every such agent's report is refused by.
	dir := t.TempDir()
	tok := filepath.Join(dir, "agent.token")
	os.WriteFile(tok, []byte("agent-secret\n"), 0o600)
	old := filepath.Join(dir, "old.toml")
	os.WriteFile(old, []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\ndb = %q\nagent_token_file = %q\n", filepath.Join(dir, "c.db"), tok)), 0o644)
	for name, run := range map[string]func() (int, string, string){
		"file": func() (int, string, string) { return llmgwRun(t, map[string]string{}, "coordinator", "--config", old) },
		"flag": func() (int, string, string) {
			return llmgwRun(t, map[string]string{}, "coordinator", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "c.db"), "--agent-token-file", tok)
		},
		"environment": func() (int, string, string) {
			return llmgwRun(t, map[string]string{"LLMGW_AGENT_TOKEN_FILE": tok}, "coordinator", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "c.db"))
		},
	} {
		code, _, errs := run()
		if code != 1 || !strings.Contains(errs, "agent_token_file") || !strings.Contains(errs, "llmgw nodes token NODE") {
			t.Errorf("agent_token_file set by %s: exit %d, %q; want 1 and a refusal naming it and 'llmgw nodes token NODE'", name, code, errs)
		}
	}
	// A token file that cannot be read stops the start with its name.
	code, _, errs = llmgwRun(t, map[string]string{}, "coordinator", "--db", filepath.Join(t.TempDir(), "c.db"),
		"--listen", "127.0.0.1:0", "--admin-token-file", "/nonexistent/admin.token")
	if code != 1 || !strings.Contains(errs, "admin-token-file") {
		t.Errorf("missing token file: exit %d, %q", code, errs)
	}
}
