//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
)

// clusterBin returns the llmgw binary and a Slurm runner for the dev
// cluster, or skips the test when there is none.
func clusterBin(t *testing.T) (string, *slurm.Runner) {
	t.Helper()
	conf, bin := os.Getenv("SLURM_CONF"), os.Getenv("LLMGW_BIN")
	if conf == "" || bin == "" {
		t.Skip("SLURM_CONF and LLMGW_BIN are not set: run with scripts/test-integration (see COMMON.md)")
	}
	return bin, &slurm.Runner{Timeout: time.Minute}
}

// slurmTools returns the absolute paths of scontrol and sinfo, for a test
// coordinator's --scontrol and --sinfo.
func slurmTools(t *testing.T) (scontrol, sinfo string) {
	t.Helper()
	scontrol, err1 := exec.LookPath("scontrol")
	sinfo, err2 := exec.LookPath("sinfo")
	if err1 != nil || err2 != nil {
		t.Fatalf("scontrol, sinfo: %v %v", err1, err2)
	}
	return scontrol, sinfo
}

// putFeaturesBack puts every dev node's features back as they are now once
// t ends (slurm.PutBack), so a test whose coordinator wrote presence leaves
// the next test the cluster it found. Call it before starting the
// coordinator: cleanups run last-registered first, so this one runs after
// the coordinator stopped and cannot write them again.
func putFeaturesBack(t *testing.T, sl *slurm.Runner) {
	t.Helper()
	before, err := sl.Nodes(context.Background())
	if err != nil {
		t.Fatalf("the dev nodes' features before the test: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		now, err := sl.Nodes(ctx)
		if err != nil {
			t.Errorf("the dev nodes' features after the test: %v", err)
			return
		}
		for _, put := range slurm.PutBack(before, now) {
			if _, err := sl.Run(ctx, "scontrol", put.Args()...); err != nil {
				t.Errorf("putting the dev nodes' features back: %v", err)
			}
		}
	})
}

// noneDrained fails t when Slurm lists a drained or down node with a
// reason (sinfo -R): no llmgw hook may ever take a node out of service.
func noneDrained(t *testing.T, sl *slurm.Runner) {
	t.Helper()
	if out, err := sl.Run(context.Background(), "sinfo", "-R", "-h"); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("sinfo -R: %q, %v; want no drained node", out, err)
	}
}

// daemon starts bin with args, logging to a file in the test's temp dir,
// and stops it (SIGTERM, by its pid) when the test ends.
func daemon(t *testing.T, bin string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	// Named after the command, and the node for an agent: a test may run
	// several.
	label := args[0]
	if i := slices.Index(args, "--node"); i > 0 && i+1 < len(args) {
		label += " " + args[i+1]
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), args[0]+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", label, b)
		}
	})
	return cmd
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func runBin(t *testing.T, bin string, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// gcCatalog serves the models kept, gone and used from an origin on
// 127.0.0.1 (4 KiB each) and adds them to the catalog; src gives a model's
// source.
func gcCatalog(t *testing.T, bin string, admin []string) (originURL string, src func(name string) string) {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(bytes.Repeat([]byte(r.URL.Path), 4096)))
	}))
	t.Cleanup(origin.Close)
	src = func(name string) string { return origin.URL + "/m/" + name + ".gguf" }
	for _, m := range []string{"kept", "gone", "used"} {
		if out, errs, err := runBin(t, bin, admin, "models", "add", m, src(m)); err != nil {
			t.Fatalf("models add %s: %v: %s%s", m, err, out, errs)
		}
	}
	return origin.URL, src
}

// coordProcess is a real coordinator process for a cluster test.
type coordProcess struct {
	url   string
	dir   string   // where its database and token files are
	bin   string   // the llmgw it runs
	admin []string // the environment of an admin command (llmgw models, features)
	cmd   *exec.Cmd
}

// nodeTok makes node's own token with `llmgw nodes token NODE --out FILE`,
// as an admin does for a node, and returns FILE.
func (c coordProcess) nodeTok(t *testing.T, node string) string {
	t.Helper()
	f := filepath.Join(c.dir, node+".token")
	if out, errs, err := runBin(t, c.bin, c.admin, "nodes", "token", node, "--out", f); err != nil {
		t.Fatalf("nodes token %s: %v: %s%s", node, err, out, errs)
	}
	return f
}

// startCoordinator runs `llmgw coordinator` on a free port of 127.0.0.1,
// with a database and token files in dir and the extra flags given, and
// waits until it is ready. It stops when the test ends.
func startCoordinator(t *testing.T, bin, dir string, flags ...string) coordProcess {
	t.Helper()
	adminTok := filepath.Join(dir, "admin.token")
	os.WriteFile(adminTok, []byte("admin-secret\n"), 0o600)
	addr := freeAddr(t)
	c := coordProcess{url: "http://" + addr, dir: dir, bin: bin}
	c.cmd = daemon(t, bin, nil, append([]string{"coordinator", "--listen", addr, "--db", filepath.Join(dir, "c.db"),
		"--admin-token-file", adminTok}, flags...)...)
	waitFor(t, 10*time.Second, "coordinator ready", func() bool {
		resp, err := http.Get(c.url + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	c.admin = []string{"LLMGW_COORDINATOR=" + c.url, "LLMGW_TOKEN_FILE=" + adminTok}
	return c
}

// waitFor polls cond every 200 ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterGC is the gc on the dev cluster, end to end with the real
// binary: a coordinator and n1's agent as processes, weights fetched with
// `llmgw fetch` from an origin on 127.0.0.1, a real Slurm job on n1 whose
// record (as the Prolog leaves it) points at one of them. Two models leave
// the catalog; `llmgw gc --collect` then removes the one no job uses and
// keeps the one the running job uses, and leaves the operator's file of
// the same size and a symlink with a cache name. Between the agent and the
// coordinator a proxy plays a tampered coordinator and adds
// "../etc/passwd", an absolute path and a non-cache name to what n1 is
// asked: n1 refuses each, and `llmgw gc` reports why. Last, the Epilog's
// path: gc.Run as the Epilog calls it keeps the in-use file while the job
// runs and removes it once the job has ended and its record is gone.
func TestClusterGC(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	base := t.TempDir()
	// The coordinator, reporting interval 2 s: gc waits up to 4 s.
	coord := startCoordinator(t, bin, base, "--report-interval", "2s")
	coordURL, agentTok, admin := coord.url, coord.nodeTok(t, "n1"), coord.admin

	// The origin and the catalog.
	originURL, src := gcCatalog(t, bin, admin)

	// n1's cache: the three fetched for real, an operator's file of the
	// same size as the one to go, a symlink with a cache name.
	node := filepath.Join(base, "n1")
	cache, runDir := filepath.Join(node, "cache"), filepath.Join(node, "run")
	for _, m := range []string{"kept", "gone", "used"} {
		out, errs, err := runBin(t, bin, nil, "fetch", src(m), "--cache-dir", cache, "--lock-dir", filepath.Join(node, "locks"))
		if err != nil || strings.TrimSpace(out) != catalog.CachePathFor(cache, src(m)) {
			t.Fatalf("fetch %s: %v: %q %s", m, err, out, errs)
		}
	}
	gonePath, usedPath, keptPath := catalog.CachePathFor(cache, src("gone")), catalog.CachePathFor(cache, src("used")), catalog.CachePathFor(cache, src("kept"))
	// gc keeps what was fetched within gc_interval (a Prolog may have
	// fetched it against a catalog newer than the node's copy): these were
	// fetched long ago as far as it is concerned.
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
	os.WriteFile(operator, make([]byte, fi.Size()), 0o644)
	linkName := catalog.CacheName(originURL + "/m/link.gguf")
	if err := os.Symlink(gonePath, filepath.Join(cache, linkName)); err != nil {
		t.Fatal(err)
	}

	// A real job on n1, and the record its Prolog would have left.
	out, err := sl.Run(ctx, "sbatch", "--parsable", "-w", "n1", "-J", "llmgw-gc-integration", "-o", "/dev/null", "--wrap", "sleep 300")
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	job := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { sl.Run(context.Background(), "scancel", job) })
	waitFor(t, 30*time.Second, "job "+job+" running", func() bool {
		out, _ := sl.Run(ctx, "squeue", "-h", "-j", job, "-o", "%T")
		return strings.TrimSpace(string(out)) == "RUNNING"
	})
	if err := catalog.WriteJobRecord(runDir, catalog.JobRecord{Job: job, Model: "used", Source: src("used"), Path: usedPath, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// The tampered coordinator in front of the real one.
	hostile := []string{"../etc/passwd", "/etc/passwd", gonePath, filepath.Base(operator), linkName}
	tampered := tamperedCoordinator(t, coordURL, hostile)

	daemon(t, bin, nil, "agent", "--node", "n1", "--fabric", "ib-a", "--coordinator", tampered.URL, "--token-file", agentTok,
		"--cache-dir", cache, "--state-dir", node, "--run-dir", runDir, "--socket", filepath.Join(node, "agent.sock"),
		"--report-interval", "1s", "--scan-interval", "1s")
	c := &api.Client{BaseURL: coordURL}
	waitFor(t, 15*time.Second, "n1 reported holding gone", func() bool {
		st, err := c.ModelStatus(ctx, "gone")
		return err == nil && len(st.Nodes) == 1 && st.Nodes[0].Path == gonePath
	})

	for _, m := range []string{"gone", "used"} {
		if out, errs, err := runBin(t, bin, admin, "models", "rm", m); err != nil {
			t.Fatalf("models rm %s: %v: %s%s", m, err, out, errs)
		}
	}
	// The agent's catalog copy follows the catalog on its next report.
	waitFor(t, 10*time.Second, "n1's catalog copy without gone", func() bool {
		cp, err := catalog.ReadCopy(filepath.Join(node, "catalog.json"))
		_, has := cp.Lookup("gone")
		return err == nil && len(cp.Models) == 1 && !has
	})

	// First a listing, in the table operators read.
	out2, errs, err := runBin(t, bin, admin, "gc")
	t.Logf("llmgw gc:\n%s", out2)
	if err != nil {
		t.Fatalf("llmgw gc: %v: %s", err, errs)
	}
	for _, want := range []string{"list only", "would remove  " + catalog.CacheName(src("gone")), "kept          " + catalog.CacheName(src("used")),
		"in use by job " + job, "refused       ../etc/passwd", "refused       /etc/passwd", "refused       " + linkName, "symlink",
		"not a cache name", "absolute path", "traversal"} {
		if !strings.Contains(out2, want) {
			t.Errorf("llmgw gc output lacks %q", want)
		}
	}
	if _, err := os.Stat(gonePath); err != nil {
		t.Fatalf("listing removed %s: %v", gonePath, err)
	}

	// Then collect.
	out3, errs, err := runBin(t, bin, admin, "gc", "--collect", "--json")
	if err != nil {
		t.Fatalf("llmgw gc --collect: %v: %s", err, errs)
	}
	var st api.GCStatus
	if err := json.Unmarshal([]byte(out3), &st); err != nil || len(st.Nodes) != 1 || st.Nodes[0].Answer == nil {
		t.Fatalf("llmgw gc --collect --json: %v:\n%s\n%s", err, out3, errs)
	}
	n1 := st.Nodes[0]
	t.Logf("n1 was asked to remove %q and answered: %+v", n1.Asked, n1.Answer.Files)
	actions := map[string]api.GCFile{}
	for _, f := range n1.Answer.Files {
		actions[f.Name] = f
	}
	want := map[string]string{
		catalog.CacheName(src("gone")): gc.Removed,
		catalog.CacheName(src("used")): gc.Kept,
		"../etc/passwd":                gc.Refused,
		"/etc/passwd":                  gc.Refused,
		gonePath:                       gc.Refused,
		filepath.Base(operator):        gc.Refused,
		linkName:                       gc.Refused,
	}
	for name, action := range want {
		if f, ok := actions[name]; !ok || f.Action != action {
			t.Errorf("%s: %+v, want %s", name, f, action)
		}
	}
	if n1.Answer.Freed != fi.Size() {
		t.Errorf("freed %d bytes, want %d", n1.Answer.Freed, fi.Size())
	}
	if _, err := os.Stat(gonePath); !os.IsNotExist(err) {
		t.Errorf("%s is still there after gc --collect: %v", gonePath, err)
	}
	for _, p := range []string{usedPath, keptPath, operator, filepath.Join(cache, linkName), "/etc/passwd"} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}

	// The Epilog's path, as the Epilog calls it: collect on this node
	// with the agent's catalog copy and run dir.
	epilog := func() gc.Result {
		cp, cerr := catalog.ReadCopy(filepath.Join(node, "catalog.json"))
		return gc.Run(gc.Options{CacheDir: cache, Catalog: cp, CatalogErr: cerr, RunDir: runDir, Collect: true})
	}
	if r := epilog(); r.Count(gc.Removed) != 0 || fileAction(r, catalog.CacheName(src("used"))) != gc.Kept {
		t.Fatalf("epilog gc while job %s runs: %+v", job, r.Files)
	}
	if _, err := sl.Run(ctx, "scancel", job); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "job "+job+" gone from the queue", func() bool {
		out, err := sl.Run(ctx, "squeue", "-h", "-j", job, "-o", "%T")
		return err != nil || strings.TrimSpace(string(out)) == ""
	})
	// The Epilog clears the job's record before its gc.
	p, _ := catalog.JobRecordPath(runDir, job)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	r := epilog()
	if fileAction(r, catalog.CacheName(src("used"))) != gc.Removed || r.Held != "" {
		t.Errorf("epilog gc after job %s ended: %+v (held %q)", job, r.Files, r.Held)
	}
	if _, err := os.Stat(usedPath); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the job ended: %v", usedPath, err)
	}
	for _, p := range []string{keptPath, operator, filepath.Join(cache, linkName)} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}

	// No node was drained along the way.
	noneDrained(t, sl)
}

func fileAction(r gc.Result, name string) string {
	for _, f := range r.Files {
		if f.Name == name {
			return f.Action
		}
	}
	return fmt.Sprintf("(no entry for %s)", name)
}
