//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestEpilogCollects is gc as it runs in production: by a real job's
// Epilog on n1 (the dev cluster's hooks, llmgw-hook handing over to
// `llmgw epilog` when gc is due), against n1's real agent's catalog copy
// and the records the real Prologs of the jobs still running there left.
//
// n1's cache holds three fetched models. "gone" and "used" leave the
// catalog while a job that uses "used" is still running. The Epilog of the
// next job on n1 must remove gone's file and leave alone the file the
// running job uses, the model still in the catalog, an operator's file of
// the same size as gone's, and a symlink with a cache name.
func TestEpilogCollects(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	base := t.TempDir()
	c := startCoordinator(t, bin, base, "--report-interval", "1s")
	coordURL, agentTok, admin := c.url, c.nodeTok(t, "n1"), c.admin

	originURL, src := gcCatalog(t, bin, admin)

	// n1's settings, where the dev cluster's hooks on n1 read them, and
	// its agent reading the same file. gc_interval is the shortest there
	// is, so this test's job is the one whose Epilog collects.
	node := filepath.Join(base, "n1")
	cache, state, runDir := filepath.Join(node, "cache"), filepath.Join(node, "state"), filepath.Join(node, "run")
	hookDir := filepath.Join(filepath.Dir(os.Getenv("SLURM_CONF")), "llmgw")
	conf := filepath.Join(hookDir, "n1.toml")
	if err := os.MkdirAll(hookDir, 0o755); err != nil {
		t.Fatal(err)
	}
	settings := fmt.Sprintf("coordinator = %q\ntoken_file = %q\nnode = \"n1\"\nfabric = \"ib-a\"\n"+
		"cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\n"+
		"report_interval = \"1s\"\nscan_interval = \"1s\"\ngc_interval = \"1s\"\n",
		coordURL, agentTok, cache, state, runDir, filepath.Join(node, "agent.sock"))
	if err := os.WriteFile(conf, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(conf)
		os.Remove(nodeconf.ResolvedPath(conf))
		os.Remove(hookDir) // only when empty
	})
	daemon(t, bin, nil, "agent", "--config", conf)

	for _, m := range []string{"kept", "gone", "used"} {
		out, errs, err := runBin(t, bin, nil, "fetch", src(m), "--cache-dir", cache, "--lock-dir", filepath.Join(runDir, "locks"))
		if err != nil || strings.TrimSpace(out) != catalog.CachePathFor(cache, src(m)) {
			t.Fatalf("fetch %s: %v: %q %s", m, err, out, errs)
		}
	}
	gonePath, usedPath, keptPath := catalog.CachePathFor(cache, src("gone")), catalog.CachePathFor(cache, src("used")), catalog.CachePathFor(cache, src("kept"))
	// The Epilog's gc keeps what was fetched within gc_interval (a Prolog
	// may have fetched it against a catalog newer than the node's copy):
	// these were fetched long ago as far as it is concerned.
	long := time.Now().Add(-24 * time.Hour)
	for _, p := range []string{gonePath, usedPath, keptPath} {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(gonePath)
	if err != nil {
		t.Fatal(err)
	}
	operator := filepath.Join(cache, "gone-copy-by-hand.gguf")
	if err := os.WriteFile(operator, make([]byte, fi.Size()), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(cache, catalog.CacheName(originURL+"/m/link.gguf"))
	if err := os.Symlink(gonePath, link); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(state, "catalog.json")
	waitFor(t, 10*time.Second, "n1's catalog copy", func() bool {
		cp, err := catalog.ReadCopy(copyPath)
		return err == nil && len(cp.Models) == 3
	})

	// A job on n1 that uses "used": its Prolog (the fast path: the file is
	// in the cache) leaves the record gc reads.
	out, err := sl.Run(ctx, "sbatch", "--parsable", "-w", "n1", "-n1", "-J", "llmgw-epilog-user",
		"-o", "/dev/null", "--comment=llmgw:model=used", "--wrap", "sleep 300")
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	user := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { sl.Run(context.Background(), "scancel", user) })
	waitFor(t, 30*time.Second, "job "+user+" running", func() bool {
		out, _ := sl.Run(ctx, "squeue", "-h", "-j", user, "-o", "%T")
		return strings.TrimSpace(string(out)) == "RUNNING"
	})
	waitFor(t, 10*time.Second, "job "+user+"'s record from its Prolog", func() bool {
		r, err := catalog.ReadJobRecord(runDir, user)
		return err == nil && r.Path == usedPath
	})

	// gone and used leave the catalog; the agent's copy follows.
	for _, m := range []string{"gone", "used"} {
		if out, errs, err := runBin(t, bin, admin, "models", "rm", m); err != nil {
			t.Fatalf("models rm %s: %v: %s%s", m, err, out, errs)
		}
	}
	waitFor(t, 10*time.Second, "n1's catalog copy without gone and used", func() bool {
		cp, err := catalog.ReadCopy(copyPath)
		return err == nil && len(cp.Models) == 1
	})

	// The next job on n1 ends; its Epilog collects.
	start := time.Now()
	if out, err := sl.Run(ctx, "sbatch", "--wait", "-w", "n1", "-n1", "-J", "llmgw-epilog-gc", "-o", "/dev/null", "--wrap", "true"); err != nil {
		t.Fatalf("sbatch --wait: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the Epilog to remove "+gonePath, func() bool {
		_, err := os.Lstat(gonePath)
		return os.IsNotExist(err)
	})
	t.Logf("gone's file removed %.1f s after the job was submitted", time.Since(start).Seconds())
	for _, p := range []string{usedPath, keptPath, operator, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
	noneDrained(t, sl)
}
