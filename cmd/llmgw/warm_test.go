package main

import (
	"strings"
	"testing"
)

// TestWarmCommand: with the prefetcher off (no --features) there is
// nothing to wait for, so ready; a coordinator that cannot be asked never
// holds a job either; a job id that is not one is the caller's mistake.
func TestWarmCommand(t *testing.T) {
	url, _, adminTok := testCoordinator(t)
	env := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	code, out, errs := llmgwRun(t, env, "warm", "1234")
	if code != 0 || !strings.HasPrefix(out, "ready: prefetch is off") {
		t.Errorf("llmgw warm 1234 with prefetch off: exit %d, %q %q; want ready", code, out, errs)
	}
	code, out, _ = llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": "http://127.0.0.1:1"}, "warm", "1234")
	if code != 0 || !strings.HasPrefix(out, "ready: the coordinator could not be asked") {
		t.Errorf("llmgw warm with no coordinator: exit %d, %q; want ready", code, out)
	}
	if code, _, _ := llmgwRun(t, env, "warm", "12;rm"); code != 2 {
		t.Errorf("llmgw warm 12;rm: exit %d; want 2 (not a job id)", code)
	}
	if code, _, _ := llmgwRun(t, env, "warm"); code != 2 {
		t.Errorf("llmgw warm without a job: exit %d; want 2", code)
	}
}
