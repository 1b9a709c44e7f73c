package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestPlaceCommand ranks over a real coordinator that the real agent
// reported to.
func TestPlaceCommand(t *testing.T) {
	url, nodeTok, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	// LLMGW_MODEL is what a job's TaskProlog exports: it must not become
	// --model.
	anon := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_MODEL": "tiny"}

	weightsDir := t.TempDir()
	model := filepath.Join(weightsDir, "tiny.gguf")
	os.WriteFile(model, []byte("GGUF weights, 24 bytes.."), 0o644) // a GGUF header's length: the scan reads it
	settled := time.Now().Add(-time.Minute)                        // and takes a file modified within seconds as still being written
	os.Chtimes(model, settled, settled)
	for _, m := range [][]string{{"tiny", model}, {"fetched", "hf:org/repo/model.gguf", "--size", "7.5GB", "--gpu-memory", "20G"}} {
		if code, _, errs := llmgwRun(t, admin, append([]string{"models", "add"}, m...)...); code != 0 {
			t.Fatalf("models add %v: exit %d, %s", m, code, errs)
		}
	}
	for _, node := range []string{"gpu01", "gpu02"} {
		stateDir := t.TempDir()
		dirs := []string{"--weights-dir", weightsDir}
		if node == "gpu02" {
			dirs = nil // never looked: ranks like a node that found nothing
		}
		args := append([]string{"agent", "--once", "--node", node, "--fabric", "ib-a", "--coordinator", url, "--token-file", nodeTok(node),
			"--cache-dir", filepath.Join(stateDir, "cache"), "--state-dir", stateDir, "--socket", filepath.Join(stateDir, "s")}, dirs...)
		if code, _, errs := llmgwRun(t, map[string]string{}, args...); code != 0 {
			t.Fatalf("agent --once %s: exit %d: %s", node, code, errs)
		}
	}

	code, out, errs := llmgwRun(t, anon, "place", "--model", "tiny")
	if code != 0 {
		t.Fatalf("place: exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"RANK  NODE   FABRIC  TIER         HOLDS  MEMORY  DISK  REASON",
		"1     gpu01  ib-a    holds-local  local  skip    skip  holds a complete local copy at " + model,
		"2     gpu02  ib-a    unchecked    none   skip    skip  does not hold it; disk not checked: a path source is never fetched",
		"USE: gpu01",
		"SKIPPED: memory not checked: the catalog gives no GPU memory for tiny",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("place lacks %q:\n%s", want, out)
		}
	}

	code, out, errs = llmgwRun(t, anon, "place", "--model", "fetched", "-N", "2", "--json")
	var p api.Placement
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("place --json: exit %d: %s\n%s", code, errs, out)
	}
	if p.Count != 2 || len(p.Nodes) != 2 || strings.Join(p.Choice, ",") != "gpu01,gpu02" || p.Nodes[0].Tier != api.TierHasRoom ||
		p.Nodes[0].Disk.Result != api.CheckPass || p.Nodes[0].Memory.Result != api.CheckSkip || !strings.Contains(p.Note, "a job fetches it") {
		t.Errorf("place --json = %+v", p)
	}

	code, out, _ = llmgwRun(t, anon, "place", "--model", "fetched", "-N", "2")
	if code != 0 || !strings.Contains(out, "FABRIC  HOLDERS  LOCAL  USABLE  ENOUGH") || !strings.Contains(out, "a fetch is 7.5 GB") ||
		!strings.Contains(out, "memory not checked: the node's GPU memory is unknown") {
		t.Errorf("place -N 2: exit %d:\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"place"}, 2, "place needs --model"},
		{[]string{"place", "--model", "bad,name"}, 2, "model name"},
		{[]string{"place", "--model", "tiny", "extra"}, 2, "takes no arguments"},
		{[]string{"place", "--model", "tiny", "-N", "0"}, 2, "at least one node"},
		{[]string{"place", "--model", "nope"}, 1, "not in the catalog"},
	} {
		code, _, errs := llmgwRun(t, anon, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: exit %d, %q; want %d with %q", tc.args, code, errs, tc.code, tc.msg)
		}
	}
}
