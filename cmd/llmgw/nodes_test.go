package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/coordinator"
)

// TestNodesCommand: an admin makes n1's token into a 0600 file, n1's agent
// reports with it, and nodes rm forgets n1.
func TestNodesCommand(t *testing.T) {
	url, _, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	out := filepath.Join(t.TempDir(), "n1.token")
	code, stdout, errs := llmgwRun(t, admin, "nodes", "token", "n1", "--out", out)
	if code != 0 || !strings.Contains(stdout, out) {
		t.Fatalf("nodes token n1 --out: exit %d, %q, %q", code, stdout, errs)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %v, %v; want mode 0600", st, err)
	}
	tok, err := api.ReadToken(out)
	if err != nil {
		t.Fatal(err)
	}
	c := &api.Client{BaseURL: url, Token: tok}
	rep := &api.Report{ID: "x", Node: "n1", Looked: true}
	if _, err := c.PostReport(context.Background(), rep); err != nil {
		t.Fatalf("n1's report with its own token: %v", err)
	}
	rep.Node = "n2"
	if _, err := c.PostReport(context.Background(), rep); err == nil {
		t.Errorf("n1's token posted n2's report")
	}
	code, stdout, errs = llmgwRun(t, admin, "nodes", "rm", "n1")
	if code != 0 || !strings.Contains(stdout, "removed node n1") {
		t.Errorf("nodes rm n1: exit %d, %q, %q", code, stdout, errs)
	}
	code, _, errs = llmgwRun(t, admin, "nodes", "rm", "n1")
	if code == 0 || !strings.Contains(errs, "not known") {
		t.Errorf("nodes rm n1 again: exit %d, %q; want it named as not known", code, errs)
	}
	code, _, errs = llmgwRun(t, admin, "nodes", "rm", "n1", "--out", out)
	if code != 2 || !strings.Contains(errs, "--out applies only to token") {
		t.Errorf("nodes rm --out: exit %d, %q", code, errs)
	}
}

// TestMungeEndToEnd: the real agent reports with its node's munged, and
// commands read and administer with the host's, with no token anywhere.
func TestMungeEndToEnd(t *testing.T) {
	realm := mungetest.New(t)
	coordSock := realm.Start("127.0.0.1").Socket()
	nodeSock := realm.Start("127.0.0.2").Socket()
	url, _, _ := testCoordinatorWith(t, func(c *coordinator.Config) {
		c.AgentTokenFile, c.AdminTokenFile = "", ""
		c.MungeSocket, c.SlurmUser = coordSock, "0"
		c.Nodes = fixedNodes{{Name: "gpu01", Addrs: []string{"127.0.0.2"}}}
	})
	user := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_MUNGE_SOCKET": nodeSock}
	if code, _, errs := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": url}, "status"); code != 1 || !strings.Contains(errs, "not authorised") {
		t.Errorf("status without a credential: exit %d, %q", code, errs)
	}
	if code, out, errs := llmgwRun(t, user, "models", "add", "tiny", "/models/tiny.gguf"); code != 0 {
		t.Fatalf("models add as root with munge: exit %d, %q %q", code, out, errs)
	}
	stateDir := t.TempDir()
	for node, want := range map[string]int{"gpu01": 0, "gpu02": 1} {
		code, _, errs := llmgwRun(t, map[string]string{}, "agent", "--once", "--node", node,
			"--coordinator", url, "--munge-socket", nodeSock,
			"--cache-dir", filepath.Join(stateDir, "cache"), "--state-dir", stateDir, "--socket", filepath.Join(stateDir, "s"))
		if code != want {
			t.Errorf("agent --once --node %s from gpu01's host: exit %d, want %d: %s", node, code, want, errs)
		}
		// Refused, the agent says what a MUNGE refusal can mean, not that
		// a token file is wrong: it has none.
		if want != 0 && (!strings.Contains(errs, "refused this node's MUNGE credential") || strings.Contains(errs, "token")) {
			t.Errorf("agent --once --node %s refused: it logged %q; want the reasons a MUNGE credential is refused, and no word of a token", node, errs)
		}
	}
	code, out, errs := llmgwRun(t, user, "status", "--json")
	if code != 0 || !strings.Contains(out, `"total": 1`) {
		t.Errorf("status with munge: exit %d, %q %q; want one node", code, out, errs)
	}
}

type fixedNodes []coordinator.KnownNode

func (f fixedNodes) KnownNodes(context.Context) ([]coordinator.KnownNode, error) { return f, nil }
