//go:build integration

package full_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// readBuild is the version the llmgw binary was built as ("llmgw VERSION").
func readBuild(t *testing.T, bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "llmgw ")
}

// These tests run real jobs on the dev cluster (scripts/dev-cluster), whose
// slurm.conf points the Prolog, TaskProlog and Epilog at scripts/slurm/hook
// in the tree that started it: llmgw-hook, handing off to llmgw. Each node
// gets its own agent settings through llmgw/NODE.toml beside slurm.conf,
// which the hook wrapper passes as --config, since the four slurmd share
// this one host.

type cluster struct {
	t       *testing.T
	bin     string // the llmgw binary
	confDir string
	slurm   *slurm.Runner
}

func newCluster(t *testing.T) *cluster {
	conf := os.Getenv("SLURM_CONF")
	bin := os.Getenv("LLMGW_BIN")
	if conf == "" || bin == "" {
		t.Skip("SLURM_CONF and LLMGW_BIN must be set: run `sudo make integration`, or start scripts/dev-cluster and export both")
	}
	hook := filepath.Join(filepath.Dir(bin), "llmgw-hook")
	if _, err := os.Stat(hook); err != nil {
		t.Fatalf("%s: %v; run make build", hook, err)
	}
	c := &cluster{t: t, bin: bin, confDir: filepath.Join(filepath.Dir(conf), "llmgw"), slurm: &slurm.Runner{Timeout: 3 * time.Minute}}
	if err := os.MkdirAll(c.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// No node may be left drained by a hook: the point of them all.
		out, err := c.slurm.Run(context.Background(), "sinfo", "-R", "-h")
		if err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("sinfo -R -h = %q, %v; want no drained node", out, err)
		}
	})
	return c
}

// node configures a node's hooks and returns its settings' directory.
func (c *cluster) node(name, coordinator string) string {
	dir := filepath.Join(c.t.TempDir(), name)
	for _, d := range []string{"cache", "state", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			c.t.Fatal(err)
		}
	}
	toml := fmt.Sprintf("cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nfetch_deadline = \"40s\"\n",
		dir+"/cache", dir+"/state", dir+"/run", dir+"/run/agent.sock")
	if coordinator != "" {
		toml += fmt.Sprintf("coordinator = %q\n", coordinator)
	}
	p := filepath.Join(c.confDir, name+".toml")
	if err := os.WriteFile(p, []byte(toml), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		os.Remove(p)
		os.Remove(nodeconf.ResolvedPath(p))
	})
	return dir
}

// origin serves files over HTTP on 127.0.0.1 and counts the bytes it sent.
type origin struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	sent  atomic.Int64
	delay time.Duration // before the body, so that jobs overlap
}

func newOrigin(t *testing.T) *origin {
	o := &origin{files: map[string][]byte{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		b, ok := o.files[r.URL.Path]
		o.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		time.Sleep(o.delay)
		cw := &countingWriter{ResponseWriter: w, n: &o.sent}
		http.ServeContent(cw, r, filepath.Base(r.URL.Path), time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(o.Close)
	return o
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (o *origin) add(path string, size int) (url, sum string) {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + len(path))
	}
	o.mu.Lock()
	o.files[path] = b
	o.mu.Unlock()
	s := sha256.Sum256(b)
	return o.URL + path, hex.EncodeToString(s[:])
}

// coordinator starts `llmgw coordinator` on a free port on 127.0.0.1 and
// returns its URL and the admin token file.
func (c *cluster) coordinator() (url, token string, stop func()) {
	dir := c.t.TempDir()
	token = filepath.Join(dir, "token")
	os.WriteFile(token, []byte("test-token-0123456789\n"), 0o600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(c.bin, "coordinator", "--listen", addr, "--db", filepath.Join(dir, "coord.db"),
		"--admin-token-file", token, "--report-interval", "2s", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		})
	}
	c.t.Cleanup(stop)
	url = "http://" + addr
	for i := 0; i < 100; i++ {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			return url, token, stop
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("coordinator at %s did not come up", url)
	return
}

func (c *cluster) llmgw(args ...string) string {
	out, err := exec.Command(c.bin, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("llmgw %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// agent starts `llmgw agent` for a node, with the node's own token made
// with adminToken as an admin makes it, and waits for its socket and its
// catalog copy; stop stops it.
func (c *cluster) agent(name, dir, coordinator, adminToken string) (stop func()) {
	token := filepath.Join(dir, "node.token")
	c.llmgw("nodes", "token", name, "--out", token, "--coordinator", coordinator, "--token-file", adminToken)
	cmd := exec.Command(c.bin, "agent", "--node", name, "--fabric", "ib-a", "--coordinator", coordinator, "--token-file", token,
		"--cache-dir", dir+"/cache", "--state-dir", dir+"/state", "--run-dir", dir+"/run", "--socket", dir+"/run/agent.sock",
		"--report-interval", "2s")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			if c.t.Failed() {
				c.t.Logf("agent %s log:\n%s", name, logs.String())
			}
		})
	}
	c.t.Cleanup(stop)
	for i := 0; i < 200; i++ {
		_, e1 := os.Stat(dir + "/run/agent.sock")
		_, e2 := os.Stat(dir + "/state/catalog.json")
		if e1 == nil && e2 == nil {
			return stop
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("agent %s: no socket or catalog copy after 10 s; log:\n%s", name, logs.String())
	return stop
}

// job is one finished batch job.
type job struct {
	id     string
	rc     error
	output string
}

// sbatch runs a job for model on node and waits for it to end.
func (c *cluster) sbatch(node, model, script string) job {
	out := filepath.Join(c.t.TempDir(), "job.out")
	stdout, err := c.slurm.Run(context.Background(), "sbatch", "--wait", "--parsable", "-w", node, "-J", "llmgw-hooks",
		"--comment=run by the hooks test llmgw:model="+model, "--output="+out, "--wrap", script)
	j := job{id: strings.TrimSpace(strings.Split(string(stdout), ";")[0]), rc: err}
	b, _ := os.ReadFile(out)
	j.output = string(b)
	return j
}

const showModel = `echo "model=$LLMGW_MODEL"; echo "path=$LLMGW_MODEL_PATH"; sha256sum "$LLMGW_MODEL_PATH"`

func (c *cluster) expectWeights(j job, model, path, sum string) {
	c.t.Helper()
	if j.rc != nil {
		c.t.Fatalf("job %s for %s: %v; output:\n%s", j.id, model, j.rc, j.output)
	}
	for _, want := range []string{"model=" + model + "\n", "path=" + path + "\n", sum + "  " + path} {
		if !strings.Contains(j.output, want) {
			c.t.Errorf("job %s output lacks %q; output:\n%s", j.id, want, j.output)
		}
	}
}

// TestPrologFetchesThroughAgent: a model absent from its node is fetched by
// the Prolog through the node's agent, the job sees its path and the right
// bytes; a second job finds them present and the origin is not asked again.
func TestPrologFetchesThroughAgent(t *testing.T) {
	c := newCluster(t)
	o := newOrigin(t)
	coord, token, _ := c.coordinator()
	url, sum := o.add("/m/alpha.gguf", 3<<20)
	c.llmgw("models", "add", "alpha", url, "--size", fmt.Sprint(3<<20), "--sha256", sum, "--coordinator", coord, "--token-file", token)
	dir := c.node("n1", coord)
	c.agent("n1", dir, coord, token)
	path := catalog.CachePathFor(dir+"/cache", url)

	j := c.sbatch("n1", "alpha", showModel)
	c.expectWeights(j, "alpha", path, sum)
	if got := o.sent.Load(); got != 3<<20 {
		t.Errorf("origin sent %d bytes, want %d (one fetch)", got, 3<<20)
	}
	// llmgw prolog left the resolved copy of the node's agent.toml, so the
	// next job's hooks need not parse it.
	if _, err := nodeconf.ReadResolved(filepath.Join(c.confDir, "n1.toml"), readBuild(t, c.bin)); err != nil {
		t.Errorf("after the first job: %v", err)
	}
	j = c.sbatch("n1", "alpha", showModel)
	c.expectWeights(j, "alpha", path, sum)
	if got := o.sent.Load(); got != 3<<20 {
		t.Errorf("after a second job the origin sent %d bytes, want %d: the weights were present", got, 3<<20)
	}
	// The Epilog cleared the job's record. sbatch --wait returns when the
	// batch script ends, before slurmd has run the Epilog (the job is
	// COMPLETING meanwhile), so the record may outlive sbatch briefly.
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err = catalog.ReadJobRecord(dir+"/run", j.id); os.IsNotExist(err) || time.Now().After(deadline) {
			break
		}
	}
	if !os.IsNotExist(err) {
		t.Errorf("job %s's record 20 s after its batch script ended: %v; want none (the Epilog clears it)", j.id, err)
	}
}

// TestTwoJobsOneFetch: two jobs for one model starting together on one node
// without an agent: each Prolog fetches in its own process, and the
// node-local lock makes it one fetch.
func TestTwoJobsOneFetch(t *testing.T) {
	c := newCluster(t)
	o := newOrigin(t)
	o.delay = 2 * time.Second
	coord, token, _ := c.coordinator()
	url, sum := o.add("/m/beta.safetensors", 2<<20)
	c.llmgw("models", "add", "beta", url, "--sha256", sum, "--coordinator", coord, "--token-file", token)
	dir := c.node("n2", coord)
	path := catalog.CachePathFor(dir+"/cache", url)

	var wg sync.WaitGroup
	jobs := make([]job, 2)
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs[i] = c.sbatch("n2", "beta", showModel)
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		c.expectWeights(j, "beta", path, sum)
	}
	if got := o.sent.Load(); got != 2<<20 {
		t.Errorf("origin sent %d bytes for two jobs, want %d (one fetch)", got, 2<<20)
	}
}

// TestOriginNotFound: the origin answers 404. The job fails at once with
// the reason in its output and in its AdminComment; the node stays in
// service.
func TestOriginNotFound(t *testing.T) {
	c := newCluster(t)
	o := newOrigin(t)
	coord, token, _ := c.coordinator()
	url := o.URL + "/m/gone.gguf"
	c.llmgw("models", "add", "gone", url, "--coordinator", coord, "--token-file", token)
	c.node("n3", coord)

	j := c.sbatch("n3", "gone", `echo "the job script ran"`)
	if j.rc == nil {
		t.Fatalf("job %s for a model the origin does not have succeeded; output:\n%s", j.id, j.output)
	}
	want := "llmgw: weights for model gone (source " + url + ") could not be had on n3"
	if !strings.Contains(j.output, want) || !strings.Contains(j.output, "404") {
		t.Errorf("job %s output lacks %q and the 404; output:\n%s", j.id, want, j.output)
	}
	if strings.Contains(j.output, "the job script ran") {
		t.Errorf("job %s's script ran although its weights could not be had", j.id)
	}
	// sbatch --wait returns when the batch script ends; the job is
	// COMPLETING until its Epilog is done (seen on a loaded 22.05).
	var show []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if show, err = c.slurm.Run(context.Background(), "scontrol", "show", "job", j.id); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(show), "JobState=COMPLETING") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, w := range []string{"JobState=FAILED", "Reason=NonZeroExitCode", "AdminComment=" + want} {
		if !strings.Contains(string(show), w) {
			t.Errorf("scontrol show job %s lacks %q:\n%s", j.id, w, show)
		}
	}
	t.Logf("job %s output:\n%s", j.id, j.output)

	// An interactive step gets the same: the reason on the user's terminal,
	// a failed srun, and the command never run.
	sout, err := c.slurm.Run(context.Background(), "srun", "-w", "n3", "-J", "llmgw-hooks", "--comment=llmgw:model=gone", "echo", "the step ran")
	var ce *slurm.CommandError
	if !errors.As(err, &ce) || strings.Contains(string(sout), "the step ran") || !strings.Contains(string(sout)+ce.Stderr, want) {
		t.Errorf("srun for a model the origin does not have: %v; stdout %q; want a failure with %q", err, sout, want)
	} else {
		t.Logf("srun: %v; stdout %q", err, sout)
	}
	// The node returns to idle once the jobs' Epilogs are done ("completing"
	// meanwhile); a drained node would say "drained" or "draining".
	var state []byte
	for i := 0; i < 100; i++ {
		state, err = c.slurm.Run(context.Background(), "sinfo", "-h", "-n", "n3", "-o", "%T")
		if err != nil || strings.TrimSpace(string(state)) != "completing" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || strings.TrimSpace(string(state)) != "idle" {
		t.Errorf("n3 after the failed jobs: %q, %v; want idle", state, err)
	}
}

// TestCoordinatorDown: with the coordinator down the job still starts and
// gets its weights, resolved from the node-local catalog copy.
func TestCoordinatorDown(t *testing.T) {
	c := newCluster(t)
	o := newOrigin(t)
	coord, token, stop := c.coordinator()
	url, sum := o.add("/m/gamma.gguf", 1<<20)
	c.llmgw("models", "add", "gamma", url, "--sha256", sum, "--coordinator", coord, "--token-file", token)
	dir := c.node("n4", coord)
	// The agent keeps the copy while the coordinator is up, then is stopped
	// with it: neither answers during the job, so the Prolog resolves from
	// the copy and fetches in its own process.
	stopAgent := c.agent("n4", dir, coord, token)
	stop()
	stopAgent()
	if _, err := os.Stat(dir + "/state/catalog.json"); err != nil {
		t.Fatalf("the agent left no catalog copy: %v", err)
	}
	path := catalog.CachePathFor(dir+"/cache", url)

	j := c.sbatch("n4", "gamma", showModel)
	c.expectWeights(j, "gamma", path, sum)
}
