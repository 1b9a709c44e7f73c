package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
	"github.com/llmgw/llmgw/weights/scan"
)

// ggufPart is a part of a split GGUF as llama.cpp's gguf-split writes
// one, as far as anyone here reads it: the magic, a version, the tensor
// and key-value counts, then bytes.
func ggufPart(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 24; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	copy(b, "GGUF")
	binary.LittleEndian.PutUint32(b[4:], 3)
	binary.LittleEndian.PutUint64(b[8:], 1)
	binary.LittleEndian.PutUint64(b[16:], 2)
	return b
}

// setOrigin serves a split GGUF of two parts on 127.0.0.1. While hold is
// set, a GET of the second part sends half its bytes and then nothing, as
// an origin that stalls, until the client goes away; a HEAD (the set's
// size, claimed before its first byte) is answered. gets counts GETs.
type setOrigin struct {
	*httptest.Server
	parts [2]atomic.Pointer[[]byte]
	hold  atomic.Bool
	gets  [2]atomic.Int64
	// stalled is sent on once the held second part has sent its half.
	stalled chan struct{}
}

func newSetOrigin(t *testing.T) *setOrigin {
	o := &setOrigin{stalled: make(chan struct{}, 1)}
	for i := range o.parts {
		b := ggufPart(uint64(i+1), 1<<20+i*4096)
		o.parts[i].Store(&b)
	}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := -1
		switch r.URL.Path {
		case "/qwen-7b-00001-of-00002.gguf":
			i = 0
		case "/qwen-7b-00002-of-00002.gguf":
			i = 1
		}
		if i < 0 {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodGet {
			o.gets[i].Add(1)
		}
		body := *o.parts[i].Load()
		if i == 1 && o.hold.Load() && r.Method == http.MethodGet {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.WriteHeader(http.StatusOK)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			select {
			case o.stalled <- struct{}{}:
			default:
			}
			<-r.Context().Done()
			return
		}
		http.ServeContent(w, r, "p.gguf", time.Time{}, strings.NewReader(string(body)))
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *setOrigin) src(i int) string {
	return fmt.Sprintf("%s/qwen-7b-%05d-of-00002.gguf", o.URL, i+1)
}

// setNode is one node's configuration for the hooks and the agent.
type setNode struct {
	dir, conf, cache, run, state string
	name                         string
}

func newSetNode(t *testing.T, name, coord, agentTok string) setNode {
	dir := t.TempDir()
	n := setNode{dir: dir, conf: filepath.Join(dir, "agent.toml"), cache: filepath.Join(dir, "cache"),
		run: filepath.Join(dir, "run"), state: filepath.Join(dir, "state"), name: name}
	os.WriteFile(n.conf, []byte(fmt.Sprintf("coordinator = %q\ntoken_file = %q\nnode = %q\nrun_dir = %q\nstate_dir = %q\ncache_dir = %q\nsocket = %q\nfetch_deadline = \"30s\"\n",
		coord, agentTok, name, n.run, n.state, n.cache, filepath.Join(n.run, "agent.sock"))), 0o644)
	return n
}

func (n setNode) job(id string) map[string]string {
	return map[string]string{"SLURM_JOB_ID": id, "SLURMD_NODENAME": n.name, "SPANK_LLMGW_MODEL": "qwen"}
}

// report runs the real agent once, which scans the node's cache and
// reports it to the coordinator.
func (n setNode) report(t *testing.T, coord, agentTok string) {
	t.Helper()
	code, _, errs := llmgwRun(t, map[string]string{}, "agent", "--once", "--node", n.name, "--fabric", "ib-a",
		"--coordinator", coord, "--token-file", agentTok, "--cache-dir", n.cache, "--state-dir", n.state, "--socket", filepath.Join(n.run, "agent.sock"))
	if code != 0 {
		t.Fatalf("agent --once: exit %d: %s", code, errs)
	}
}

// setWeight is what a scan of the node's cache says of the set directory.
func (n setNode) setWeight(t *testing.T, setName string) scan.Local {
	t.Helper()
	rep := scan.Scan(t.Context(), []string{n.cache}, scan.Options{})
	for _, w := range rep.Weights {
		if filepath.Base(w.Path) == setName {
			return w
		}
		if strings.Contains(w.Path, "qwen-7b") {
			t.Errorf("the scan reports a part on its own: %+v", w)
		}
	}
	t.Fatalf("the scan of %s does not report the set directory %s: %+v", n.cache, setName, rep)
	return scan.Local{}
}

// TestModelOfSeveralFiles is issue 15 item 14 on the real parts: `llmgw
// models add NAME A B` at a coordinator on a sqlite file, a split GGUF on
// an origin on 127.0.0.1, and `llmgw prolog` fetching both parts into one
// directory under their own names. A Prolog killed between the parts
// leaves a set that neither the scan nor the coordinator counts as held;
// the next one fetches only what is missing, and the job is given the
// first part. gc keeps the set while the catalog wants it and a job uses
// it, and then collects it whole. Each part is pinned on its own: when
// the origin changes one, a fresh node's fetch fails naming that part.
func TestModelOfSeveralFiles(t *testing.T) {
	coord, agentTok, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok}
	anon := map[string]string{"LLMGW_COORDINATOR": coord}
	o := newSetOrigin(t)

	code, out, errs := llmgwRun(t, admin, "models", "add", "qwen", o.src(0), o.src(1))
	if code != 0 || !strings.Contains(out, "qwen -> 2 files") {
		t.Fatalf("models add qwen A B: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "one", o.src(0)); code != 1 || !strings.Contains(errs, "already model qwen") {
		t.Errorf("a second model with a file of the set as its source: exit %d, %q; want a conflict naming qwen", code, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "bad", o.src(0), o.src(1), "--sha256", strings.Repeat("a", 64)); code != 2 || !strings.Contains(errs, "once per SOURCE") {
		t.Errorf("one --sha256 for two sources: exit %d, %q", code, errs)
	}
	code, out, _ = llmgwRun(t, anon, "models", "list", "--json")
	var models api.Models
	if code != 0 || json.Unmarshal([]byte(out), &models) != nil || len(models.Models) != 1 || len(models.Models[0].Files) != 2 {
		t.Fatalf("models list --json: exit %d:\n%s", code, out)
	}
	m := models.Models[0]
	setName := catalog.SetName(m)
	if code, out, _ := llmgwRun(t, anon, "models", "list"); code != 0 || !strings.Contains(out, "(+1 file)") || !strings.Contains(out, "2 unpinned") {
		t.Errorf("models list:\n%s", out)
	}

	node := newSetNode(t, "gpu01", coord, agentTok("gpu01"))
	setDir := filepath.Join(node.cache, setName)
	first := filepath.Join(setDir, "qwen-7b-00001-of-00002.gguf")
	second := filepath.Join(setDir, "qwen-7b-00002-of-00002.gguf")

	// A Prolog process is killed (SIGKILL: nothing of it runs after) half
	// way through the second part, with the first part whole.
	o.hold.Store(true)
	child := exec.Command(os.Args[0], "-test.run=^TestHelperPrologProcess$", "-test.count=1")
	child.Env = []string{"LLMGW_TEST_PROLOG_CHILD=1", "LLMGW_TEST_CONF=" + node.conf}
	for k, v := range node.job("1") {
		child.Env = append(child.Env, k+"="+v)
	}
	var childOut strings.Builder
	child.Stdout, child.Stderr = &childOut, &childOut
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.stalled:
	case <-time.After(20 * time.Second):
		child.Process.Kill()
		child.Wait()
		t.Fatalf("the Prolog never reached the second part: %s", childOut.String())
	}
	child.Process.Kill()
	if err := child.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the Prolog was not killed: %v: %s", err, childOut.String())
	}
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("the first part is not in the set directory under its own name: %v", err)
	}
	w := node.setWeight(t, setName)
	if w.Complete || !strings.Contains(w.Problem, "qwen-7b-00002-of-00002.gguf") {
		t.Errorf("the set with its second part unfinished: %+v; want not complete, naming the part", w)
	}
	if _, err := os.Stat(second + catalog.PartSuffix); err != nil {
		t.Errorf("the killed fetch left no .part of the second part: %v", err)
	}
	// What a kill between the two files leaves: the first part, no trace
	// of the second.
	os.Remove(second + catalog.PartSuffix)
	os.Remove(second + catalog.RangesSuffix)
	w = node.setWeight(t, setName)
	if w.Complete || !strings.Contains(w.Problem, "qwen-7b-00002-of-00002.gguf") {
		t.Errorf("the set without its second part: %+v; want not complete, naming the part", w)
	}
	node.report(t, coord, agentTok("gpu01"))
	if code, out, _ := llmgwRun(t, anon, "status"); code != 0 || !strings.Contains(out, "a job fetches") || strings.Contains(out, "local on 1 node") {
		t.Errorf("status with half the set on gpu01: want it held nowhere:\n%s", out)
	}

	o.hold.Store(false)
	firstGets := o.gets[0].Load()
	if code, _, _ := llmgwRun(t, node.job("2"), "prolog", "--config", node.conf); code != 0 {
		t.Fatalf("prolog: exit %d", code)
	}
	rec, err := catalog.ReadJobRecord(node.run, "2")
	if err != nil || rec.Error != "" || rec.Path != first || rec.Set != setName {
		t.Fatalf("job 2's record: %+v, %v; want the first part %s and the set %s", rec, err, first, setName)
	}
	if got := o.gets[0].Load(); got != firstGets {
		t.Errorf("the first part was fetched again (%d requests, then %d)", firstGets, got)
	}
	for i, p := range []string{first, second} {
		if b, err := os.ReadFile(p); err != nil || string(b) != string(*o.parts[i].Load()) {
			t.Errorf("part %d at %s: %d bytes, %v; want the origin's bytes", i+1, p, len(b), err)
		}
	}
	code, out, _ = llmgwRun(t, node.job("2"), "task-prolog", "--config", node.conf)
	if code != 0 || !strings.Contains(out, "export LLMGW_MODEL_PATH="+first+"\n") {
		t.Errorf("task-prolog: exit %d, %q; want the first part as LLMGW_MODEL_PATH", code, out)
	}
	if w := node.setWeight(t, setName); !w.Complete || w.Size < int64(2<<20) {
		t.Errorf("the whole set: %+v; want complete, both parts counted", w)
	}
	node.report(t, coord, agentTok("gpu01"))
	if code, out, _ := llmgwRun(t, anon, "status"); code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "qwen ib-a local local on 1 node") {
		t.Errorf("status with the set on gpu01: want it held there:\n%s", out)
	}
	if code, out, _ := llmgwRun(t, anon, "models", "list"); code != 0 || !strings.Contains(out, "2 pinned") {
		t.Errorf("models list after the first verified fetch: want both files pinned:\n%s", out)
	}
	// The fast path, as the hook binary runs it, finds the set.
	if code, _, _ := llmgwRun(t, node.job("3"), "prolog", "--config", node.conf); code != 0 {
		t.Fatalf("prolog: exit %d", code)
	}
	if rec, err := catalog.ReadJobRecord(node.run, "3"); err != nil || rec.Path != first {
		t.Errorf("job 3's record: %+v, %v", rec, err)
	}
	llmgwRun(t, node.job("3"), "epilog", "--config", node.conf)

	// gc: the catalog wants the set, so it is not even listed.
	nodeGC := func(collect bool) gc.Result {
		cp, err := catalog.ReadCopy(filepath.Join(node.state, "catalog.json"))
		return gc.Run(gc.Options{CacheDir: node.cache, Catalog: cp, CatalogErr: err, RunDir: node.run, Collect: collect})
	}
	if r := nodeGC(true); len(r.Files) != 0 || r.Held != "" {
		t.Errorf("gc with the set wanted: %+v; want nothing listed", r)
	}
	if r := gc.Run(gc.Options{CacheDir: node.cache, Catalog: catalog.Copy{Models: []catalog.Model{m}}, RunDir: node.run, Collect: true,
		Only: []string{setName + "/qwen-7b-00002-of-00002.gguf"}}); r.Count(gc.Refused) != 1 {
		t.Errorf("gc asked for one file of the set: %+v; want it refused", r)
	}
	// The catalog drops it (and keeps another model, so it is not empty).
	if code, _, errs := llmgwRun(t, admin, "models", "add", "other", o.URL+"/other.gguf"); code != 0 {
		t.Fatalf("models add other: %s", errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "rm", "qwen"); code != 0 {
		t.Fatalf("models rm qwen: %s", errs)
	}
	node.report(t, coord, agentTok("gpu01")) // refreshes the node's catalog copy
	r := nodeGC(true)
	if f := gcFile(r, setName); f.Action != gc.Kept || !strings.Contains(f.Reason, "job 2") {
		t.Errorf("gc of the unwanted set while job 2 runs: %+v; want it kept for the job", f)
	}
	llmgwRun(t, node.job("2"), "epilog", "--config", node.conf)
	llmgwRun(t, node.job("1"), "epilog", "--config", node.conf)
	r = nodeGC(true)
	if f := gcFile(r, setName); f.Action != gc.Removed || f.Size < int64(2<<20) || len(r.Files) != 1 {
		t.Errorf("gc of the unwanted set: %+v; want the directory removed whole, both parts counted", r)
	}
	if _, err := os.Lstat(setDir); !os.IsNotExist(err) {
		t.Errorf("the set directory after gc: %v; want it gone", err)
	}
}

// TestHelperPrologProcess is `llmgw prolog` in a process of its own, for
// TestModelOfSeveralFiles to kill.
func TestHelperPrologProcess(t *testing.T) {
	if os.Getenv("LLMGW_TEST_PROLOG_CHILD") != "1" {
		t.Skip("helper process for TestModelOfSeveralFiles")
	}
	e := &env{stdin: strings.NewReader(""), stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(context.Background(), []string{"prolog", "--config", os.Getenv("LLMGW_TEST_CONF")}, e))
}

// TestModelOfSeveralFilesPinMismatch: each file of a set is pinned on its
// own, at the first verified fetch; when the origin later serves other
// bytes for one part, a node that fetches the set fails its job with a
// message naming that part, its pinned digest and the way out.
func TestModelOfSeveralFilesPinMismatch(t *testing.T) {
	coord, agentTok, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok}
	o := newSetOrigin(t)
	if code, _, errs := llmgwRun(t, admin, "models", "add", "qwen", o.src(0), o.src(1)); code != 0 {
		t.Fatalf("models add: %s", errs)
	}
	n1 := newSetNode(t, "gpu01", coord, agentTok("gpu01"))
	llmgwRun(t, n1.job("1"), "prolog", "--config", n1.conf)
	if rec, err := catalog.ReadJobRecord(n1.run, "1"); err != nil || rec.Error != "" {
		t.Fatalf("first fetch: %+v, %v", rec, err)
	}
	changed := ggufPart(99, 1<<20+4096)
	o.parts[1].Store(&changed)
	n2 := newSetNode(t, "gpu02", coord, agentTok("gpu02"))
	llmgwRun(t, n2.job("2"), "prolog", "--config", n2.conf)
	rec, err := catalog.ReadJobRecord(n2.run, "2")
	if err != nil || rec.Path != "" || !strings.Contains(rec.Error, "qwen-7b-00002-of-00002.gguf") ||
		!strings.Contains(rec.Error, "model qwen is pinned to sha256") || !strings.Contains(rec.Error, "llmgw models repin qwen") {
		t.Fatalf("the changed part on a fresh node: %+v, %v; want the job failed naming the part, its pin and repin", rec, err)
	}
	if strings.Contains(rec.Error, "qwen-7b-00001-of-00002.gguf") {
		t.Errorf("the message names the unchanged part too: %s", rec.Error)
	}
}

func gcFile(r gc.Result, name string) gc.File {
	for _, f := range r.Files {
		if f.Name == name {
			return f
		}
	}
	return gc.File{}
}
