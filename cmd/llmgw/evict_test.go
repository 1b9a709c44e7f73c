package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
)

// agentOn starts node's agent in fabric with its cache at cache and the
// watermarks given; it returns the agent and a client for its socket.
func (e *evictEnv) agentOn(node, fabric, cache string, high, low int) (*agent.Agent, *api.LocalClient) {
	t := e.t
	t.Helper()
	tok, err := e.admin.NewNodeToken(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	nd := filepath.Join(e.dir, node)
	os.MkdirAll(nd, 0o755)
	tokFile := filepath.Join(nd, "token")
	os.WriteFile(tokFile, []byte(tok.Token+"\n"), 0o600)
	cfg := agent.Config{Node: node, Fabric: fabric, Coordinator: e.url, TokenFile: tokFile, CacheDir: cache,
		StateDir: filepath.Join(nd, "state"), RunDir: filepath.Join(nd, "run"), Socket: filepath.Join(nd, "a.sock"),
		ReportInterval: time.Second, ScanInterval: time.Second, CacheHigh: high, CacheLow: low, Version: "test"}
	log := logrus.New()
	log.SetOutput(&testLog{t: t, node: node})
	a, err := agent.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	lc := &api.LocalClient{Socket: cfg.Socket}
	pollUntil(t, 10*time.Second, node+"'s agent answering", func() bool {
		_, err := lc.Status(context.Background())
		return err == nil
	})
	return a, lc
}

// testLog sends an agent's log to the test's, so a failure shows it.
type testLog struct {
	t    *testing.T
	node string
	mu   sync.Mutex
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Logf("%s: %s", l.node, bytes.TrimSpace(p))
	return len(p), nil
}

func (e *evictEnv) ensure(lc *api.LocalClient, name string, mib int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return lc.Ensure(ctx, api.EnsureRequest{Source: e.src(name, mib)}, nil)
}

// waitHolds waits until the coordinator says node holds model.
func (e *evictEnv) waitHolds(node, model string) {
	e.t.Helper()
	pollUntil(e.t, 10*time.Second, node+" reported holding "+model, func() bool {
		st, err := e.admin.ModelStatus(context.Background(), model)
		if err != nil {
			return false
		}
		for _, n := range st.Nodes {
			if n.Node == node && n.Holds != api.HoldNone {
				return true
			}
		}
		return false
	})
}

// TestEvictionOnAFullDisk runs eviction end to end on a 120 MiB ext4
// filesystem: a fetch that does not fit evicts the copy another node of
// the fabric also holds, never the fabric's last copies of models used
// just now; a fetch that eviction cannot make room for fails saying what
// holds the room and why; above cache_high the agent evicts what no
// catalog entry wants first; and `llmgw gc` shows what was evicted and why.
func TestEvictionOnAFullDisk(t *testing.T) {
	cache := filepath.Join(loopfs.Mount(t, 120), "cache")
	e := newEvictEnv(t)
	for _, m := range []struct {
		name string
		mib  int
	}{{"a", 30}, {"b", 30}, {"c", 30}, {"d", 40}, {"e", 40}} {
		e.add(m.name, m.mib)
	}
	// n2 holds a, in n1's fabric; x1 holds b, in another fabric.
	_, n2 := e.agentOn("n2", "f1", filepath.Join(e.dir, "n2-cache"), 0, 0)
	_, x1 := e.agentOn("x1", "f2", filepath.Join(e.dir, "x1-cache"), 0, 0)
	if _, err := e.ensure(n2, "a", 30); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ensure(x1, "b", 30); err != nil {
		t.Fatal(err)
	}
	// n1: watermarks out of the way until the watermark part.
	n1a, n1 := e.agentOn("n1", "f1", cache, 100, 90)
	for _, m := range []string{"a", "b", "c"} {
		if _, err := e.ensure(n1, m, 30); err != nil {
			t.Fatalf("n1 ensure %s: %v", m, err)
		}
	}
	e.waitHolds("n2", "a")
	e.waitHolds("n1", "c")
	// Eviction keeps what was written within the last 30 s (the Prolog
	// that fetched it has yet to write the record that names it): these
	// were fetched long ago as far as it is concerned. Their jobs' use is
	// what the agent noted at each ensure, and stays recent.
	backdate := func(names ...string) {
		long := time.Now().Add(-time.Hour)
		for _, n := range names {
			mib := map[string]int{"a": 30, "b": 30, "c": 30, "d": 40}[n]
			if err := os.Chtimes(catalog.CachePathFor(cache, e.src(n, mib)), long, long); err != nil {
				t.Fatal(err)
			}
		}
	}
	backdate("a", "b", "c")

	// d does not fit: a goes, since n2 holds it; b and c are f1's last
	// copies (x1's b is in another fabric) and were used just now.
	if _, err := e.ensure(n1, "d", 40); err != nil {
		t.Fatalf("n1 ensure d, which fits once a is evicted: %v", err)
	}
	exists := func(m string, mib int) bool {
		_, err := os.Stat(catalog.CachePathFor(cache, e.src(m, mib)))
		return err == nil
	}
	if exists("a", 30) || !exists("b", 30) || !exists("c", 30) || !exists("d", 40) {
		t.Fatalf("after d: a %v b %v c %v d %v; want a evicted, b, c, d kept", exists("a", 30), exists("b", 30), exists("c", 30), exists("d", 40))
	}

	backdate("d")
	// e does not fit, and nothing may go: refused, saying why.
	_, err := e.ensure(n1, "e", 40)
	var ae *api.Error
	if err == nil || !errors.As(err, &ae) {
		t.Fatalf("n1 ensure e with nothing evictable: %v; want a refusal", err)
	}
	for _, want := range []string{"needs 42 MB", "the last copy in this fabric of model", "keep_last_copy_for"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if !exists("b", 30) || !exists("c", 30) || !exists("d", 40) {
		t.Fatal("a refused fetch evicted what it must not")
	}

	// Above cache_high the agent evicts by itself, what nothing wants
	// first: b leaves the catalog.
	if err := e.admin.DeleteModel(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "n1's catalog copy without b", func() bool {
		cp, err := catalog.ReadCopy(filepath.Join(e.dir, "n1", "state", "catalog.json"))
		_, has := cp.Lookup("b")
		return err == nil && !has
	})
	cfg := n1a.Config()
	cfg.CacheHigh, cfg.CacheLow = 50, 40
	if err := n1a.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 10*time.Second, "b evicted above cache_high", func() bool { return !exists("b", 30) })
	if !exists("c", 30) || !exists("d", 40) {
		t.Fatal("the watermark pass evicted a fabric's recent last copy")
	}

	// llmgw gc lists the evictions with their reasons.
	envs := map[string]string{"LLMGW_COORDINATOR": e.url, "LLMGW_TOKEN_FILE": writeToken(t, "admin-secret")}
	code, out, errs := llmgwRun(t, envs, "gc", "--node", "n1")
	if code != 0 {
		t.Fatalf("llmgw gc: %d %s", code, errs)
	}
	t.Logf("llmgw gc:\n%s", out)
	for _, want := range []string{"evicted", catalog.CacheName(e.src("a", 30)), "other node(s) of this fabric hold model a",
		catalog.CacheName(e.src("b", 30)), "superseded: model b no longer wants it", "(watermark)", "(fetch)"} {
		if !strings.Contains(out, want) {
			t.Errorf("llmgw gc output lacks %q", want)
		}
	}
}
