package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestAgentLeavesTheHooksCopy: the agent writes the resolved copy of its
// agent.toml that llmgw-hook's fast path reads, when it starts and again
// when SIGHUP reloads an edited file, the same copy a hook would leave. So
// the first job on a node whose weights are there takes the fast path
// (its record says fast: a warm start). Before, only the hooks' slow path
// wrote the copy: on a node whose agent.toml was new or edited, the first
// job always went the slow way and counted cold, whatever the cache held.
func TestAgentLeavesTheHooksCopy(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "agent.toml")
	cacheDir, runDir, stateDir := filepath.Join(dir, "cache"), filepath.Join(dir, "run"), filepath.Join(dir, "state")
	body := `cache_dir = "` + cacheDir + `"
state_dir = "` + stateDir + `"
run_dir = "` + runDir + `"
socket = "` + filepath.Join(dir, "agent.sock") + `"
node = "n1"
`
	if err := os.WriteFile(conf, []byte(body+"fetch_deadline = \"7m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A model whose weights this node holds in its cache.
	src := "http://127.0.0.1:1/m.gguf"
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(catalog.CachePathFor(cacheDir, src), []byte("GGUF weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	go func() { done <- agentCmd(ctx, e, []string{"--config", conf}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	lc := &api.LocalClient{Socket: filepath.Join(dir, "agent.sock")}
	pollUntil(t, 10*time.Second, "the agent answering", func() bool {
		_, err := lc.Status(context.Background())
		return err == nil
	})

	cfg, err := nodeconf.ReadResolved(conf, version)
	if err != nil {
		t.Fatalf("the hooks' copy once the agent started: %v", err)
	}
	if cfg.FetchDeadline != 7*time.Minute || cfg.CacheDir != cacheDir {
		t.Errorf("the copy says fetch_deadline %v, cache_dir %s; want the file's", cfg.FetchDeadline, cfg.CacheDir)
	}
	// The first job: the fast path settles it from the copy.
	cp := catalog.Copy{Models: []catalog.Model{{Name: "m", Source: src}}}
	if err := catalog.WriteCopy(cfg.WithDefaults().CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	if err := prolog.Fast(cfg.WithDefaults(), prolog.Job{ID: "1", Model: "m", Node: "n1"}, time.Now()); err != nil {
		t.Fatalf("the first job's fast path: %v", err)
	}
	if rec, err := catalog.ReadJobRecord(runDir, "1"); err != nil || !rec.Fast {
		t.Errorf("the first job's record: %+v, %v; want a fast-path (warm) start", rec, err)
	}

	// An edit, then SIGHUP: the copy follows the file.
	if err := os.WriteFile(conf, []byte(body+"fetch_deadline = \"9m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "the copy of the edited file", func() bool {
		c, err := nodeconf.ReadResolved(conf, version)
		return err == nil && c.FetchDeadline == 9*time.Minute
	})
	// What the agent left is what a hook leaves.
	agents, _ := nodeconf.ReadResolved(conf, version)
	hooks, err := hookConfig(e, "prolog", []string{"--config", conf})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(agents.WithDefaults(), hooks) {
		t.Errorf("the agent's copy %+v\nis not what a hook loads %+v", agents.WithDefaults(), hooks)
	}
}
