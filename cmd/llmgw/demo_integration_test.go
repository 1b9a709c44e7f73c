//go:build integration

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoOnCluster runs `llmgw demo` with the dev cluster up: step 8 must
// submit a real job with llmgw sbatch that runs on n3, the only node that
// holds its model, because of the preference; and afterwards the nodes
// must carry exactly the features they had, and none may be drained.

func TestDemoOnCluster(t *testing.T) {
	bin, r := clusterBin(t)
	ctx := context.Background()
	before, err := r.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "demo", "--tmp", parent).CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("llmgw demo: %v\n%s", err, text)
	}
	for _, w := range []string{
		"The coordinator has put feature llmgw.qwen-7b on n3",
		"COMPLETED on n3",
		// The hooks on n3 read the demo's settings (llmgw/n3.toml beside
		// slurm.conf): the job was told where its weights are.
		"ran on n3; LLMGW_MODEL=qwen-7b LLMGW_MODEL_PATH=$DEMO/n3/models/qwen-7b.gguf",
		"It ran on n3, the node that holds qwen-7b: llmgw sbatch added --prefer llmgw.qwen-7b",
		"the dev cluster's features put back",
	} {
		if !strings.Contains(text, w) {
			t.Errorf("the output lacks %q", w)
		}
	}
	after, err := r.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if i >= len(after) || strings.Join(before[i].Active, ",") != strings.Join(after[i].Active, ",") ||
			strings.Join(before[i].Available, ",") != strings.Join(after[i].Available, ",") {
			t.Errorf("features changed: before %+v, after %+v", before, after)
			break
		}
	}
	noneDrained(t, r)
	if ents, err := os.ReadDir(filepath.Join(filepath.Dir(os.Getenv("SLURM_CONF")), "llmgw")); err == nil && len(ents) > 0 {
		t.Errorf("the demo left hook settings in the dev cluster: %v", ents)
	}
	if left := leftovers(t, parent); len(left) > 0 {
		t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
	}
	if t.Failed() {
		t.Logf("output:\n%s", text)
	}
}
