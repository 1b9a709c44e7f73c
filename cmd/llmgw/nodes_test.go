package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
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
