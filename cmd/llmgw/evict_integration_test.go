//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestEvictOnCluster is eviction on the dev cluster with the real hooks,
// agents and coordinator: n1 and n2 (fabric ib-a) hold model a after a
// two-node job; n1 runs a job of b; then n1 runs a job of c, which does
// not fit on its 100 MiB cache disk. n1 evicts its copy of a, since n2
// still holds a, and keeps b, the fabric's last copy of a model used just
// now; n2's copy of a, now the fabric's last, stays. A job of d on n1,
// for which nothing may go, fails saying what holds the room. No node is
// drained along the way.
func TestEvictOnCluster(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	ctlMunge := devMungeSocket(t, conf, "")
	scontrol, sinfo := slurmTools(t)
	e := &e2e{bin: bin, sl: sl}
	base := t.TempDir()
	coordConf := filepath.Join(base, "coordinator.toml")
	os.WriteFile(coordConf, []byte(fmt.Sprintf("munge_socket = %q\n", ctlMunge)), 0o644)
	c := startCoordinator(t, bin, base, "--config", coordConf, "--report-interval", "1s",
		"--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	// The origin: /NAME-MiB.gguf is MiB mebibytes of NAME's letter.
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	osrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/"), ".gguf")
		var mib int
		fmt.Sscanf(name[strings.LastIndexByte(name, '-')+1:], "%d", &mib)
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), bytes.NewReader(bytes.Repeat([]byte{name[0]}, mib<<20)))
	})}
	go osrv.Serve(ol)
	t.Cleanup(func() { osrv.Close() })
	src := func(m string, mib int) string { return fmt.Sprintf("http://%s/%s-%d.gguf", ol.Addr(), m, mib) }
	sizes := map[string]int{"a": 30, "b": 30, "c": 40, "d": 40}
	for m, mib := range sizes {
		if out, errs, err := runBin(t, bin, c.admin, "models", "add", m, src(m, mib)); err != nil {
			t.Fatalf("models add %s: %v: %s%s", m, err, out, errs)
		}
		t.Cleanup(func() { runBin(t, bin, c.admin, "models", "rm", m) })
	}

	hookDir := filepath.Join(filepath.Dir(conf), "llmgw")
	os.MkdirAll(hookDir, 0o755)
	cacheOf := map[string]string{}
	for _, n := range devNodes {
		dir := filepath.Join(base, n)
		cacheOf[n] = filepath.Join(dir, "cache")
		if n == "n1" || n == "n2" {
			cacheOf[n] = filepath.Join(loopfs.Mount(t, 100), "cache")
		}
		for _, sub := range []string{"state", "run"} {
			os.MkdirAll(filepath.Join(dir, sub), 0o755)
		}
		os.MkdirAll(cacheOf[n], 0o755)
		// Watermarks out of the way: only a fetch that does not fit
		// evicts here.
		toml := fmt.Sprintf("coordinator = %q\nmunge_socket = %q\nnode = %q\nfabric = %q\n"+
			"cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nreport_interval = \"1s\"\nscan_interval = \"1s\"\ncache_high = 100\ncache_low = 90\n",
			c.url, devMungeSocket(t, conf, n), n, e2eFabric[n],
			cacheOf[n], filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "agent.sock"))
		path := filepath.Join(hookDir, n+".toml")
		if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(path)
			os.Remove(nodeconf.ResolvedPath(path))
			os.Remove(hookDir)
		})
		daemon(t, bin, nil, "agent", "--config", path, "--node", n)
	}
	waitFor(t, 20*time.Second, "n1 and n2 reporting", func() bool {
		out, _, err := runBin(t, bin, c.admin, "status")
		return err == nil && strings.Contains(out, "ib-a")
	})
	submit := func(model string, args ...string) endedJob {
		t.Helper()
		out, err := sl.Run(ctx, "sbatch", append([]string{"--parsable", "--comment=llmgw:model=" + model, "-o", "/dev/null", "--wrap", "true"}, args...)...)
		if err != nil {
			t.Fatalf("sbatch %s: %v", strings.Join(args, " "), err)
		}
		id := strings.TrimSpace(strings.Split(string(out), ";")[0])
		t.Cleanup(func() { sl.Run(context.Background(), "scancel", id) })
		return e.wait(t, id)
	}
	has := func(n, m string) bool {
		_, err := os.Stat(catalog.CachePathFor(cacheOf[n], src(m, sizes[m])))
		return err == nil
	}
	// Eviction keeps what was written within the last 30 s (its job's
	// record may not be written yet): the earlier fetches are dated back.
	backdate := func(n string, ms ...string) {
		long := time.Now().Add(-time.Hour)
		for _, m := range ms {
			os.Chtimes(catalog.CachePathFor(cacheOf[n], src(m, sizes[m])), long, long)
		}
	}
	if j := submit("a", "-N2", "-w", "n[1-2]", "-J", "llmgw-evict-a"); j.State != "COMPLETED" || !has("n1", "a") || !has("n2", "a") {
		t.Fatalf("the job of a on n[1-2]: %s; n1 has a %v, n2 %v", j.State, has("n1", "a"), has("n2", "a"))
	}
	if j := submit("b", "-w", "n1", "-J", "llmgw-evict-b"); j.State != "COMPLETED" || !has("n1", "b") {
		t.Fatalf("the job of b on n1: %s", j.State)
	}
	backdate("n1", "a", "b")
	backdate("n2", "a")
	// The coordinator must know n2 holds a before n1 asks.
	waitFor(t, 10*time.Second, "n2 reported holding a", func() bool {
		out, _, err := runBin(t, bin, c.admin, "status", "a")
		return err == nil && strings.Contains(out, "n2")
	})
	if j := submit("c", "-w", "n1", "-J", "llmgw-evict-c"); j.State != "COMPLETED" {
		t.Fatalf("the job of c on n1, which fits once n1's copy of a goes: %s", j.State)
	}
	if has("n1", "a") || !has("n1", "b") || !has("n1", "c") || !has("n2", "a") {
		t.Fatalf("after c on n1: n1 has a %v b %v c %v, n2 has a %v; want n1's a evicted (n2 holds a), b kept (ib-a's last copy), n2's a kept",
			has("n1", "a"), has("n1", "b"), has("n1", "c"), has("n2", "a"))
	}
	backdate("n1", "c")
	// d: nothing on n1 may go (b and c are ib-a's last copies, used just
	// now): the job fails, saying why; the node is not drained.
	j := submit("d", "-w", "n1", "-J", "llmgw-evict-d")
	if j.State == "COMPLETED" || has("n1", "d") || !has("n1", "b") || !has("n1", "c") {
		t.Fatalf("the job of d on n1: %s, n1 has d %v b %v c %v; want it failed with b and c kept", j.State, has("n1", "d"), has("n1", "b"), has("n1", "c"))
	}
	if !strings.Contains(j.AdminComment, "the last copy in this fabric of model") {
		t.Errorf("the failed job's AdminComment %q does not say what holds the room", j.AdminComment)
	}
	out, _, _ := runBin(t, bin, c.admin, "gc", "--node", "n1")
	t.Logf("llmgw gc --node n1:\n%s", out)
	for _, want := range []string{"evicted", catalog.CacheName(src("a", 30)), "(fetch): least recently used; 1 other node(s) of this fabric hold model a"} {
		if !strings.Contains(out, want) {
			t.Errorf("llmgw gc --node n1 lacks %q", want)
		}
	}
	noneDrained(t, sl)
}
