package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// fakeCoord stands in for the coordinator: a real HTTP server speaking the
// parts of the API the agent uses, whose answers a test scripts.
type fakeCoord struct {
	srv *httptest.Server
	got chan api.Report

	mu      sync.Mutex
	modes   []string // answers to the next POST /v1/reports, in order; then "ok"
	models  []api.Model
	garbage bool // GET /v1/models answers HTML
	auth    []string
	tried   int
}

func newFakeCoord(t *testing.T) *fakeCoord {
	t.Helper()
	fc := &fakeCoord{got: make(chan api.Report, 100)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		fc.mu.Lock()
		fc.tried++
		fc.auth = append(fc.auth, r.Header.Get("Authorization"))
		mode := "ok"
		if len(fc.modes) > 0 {
			mode, fc.modes = fc.modes[0], fc.modes[1:]
		}
		fc.mu.Unlock()
		switch mode {
		case "500":
			w.WriteHeader(500)
			io.WriteString(w, `{"code":"internal","message":"database is locked"}`)
		case "401":
			w.WriteHeader(401)
			io.WriteString(w, `{"code":"unauthorized","message":"unknown token"}`)
		case "garbage":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<html><body>Please log in</body></html>")
		case "hangup":
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		default:
			var rep api.Report
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rep); err != nil {
				w.WriteHeader(400)
				io.WriteString(w, `{"code":"invalid","message":"bad report"}`)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			fc.got <- rep
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if fc.garbage {
			io.WriteString(w, "<html>oops</html>")
			return
		}
		json.NewEncoder(w).Encode(api.Models{Models: fc.models})
	})
	fc.srv = httptest.NewServer(mux)
	t.Cleanup(fc.srv.Close)
	return fc
}

func (fc *fakeCoord) script(modes ...string) {
	fc.mu.Lock()
	fc.modes = append(fc.modes, modes...)
	fc.mu.Unlock()
}

// next waits for the next report the coordinator accepted that satisfies ok.
func (fc *fakeCoord) next(t *testing.T, within time.Duration, ok func(api.Report) bool) api.Report {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case r := <-fc.got:
			if ok == nil || ok(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("no matching report within %s", within)
		}
	}
}

// testConfig is a config whose every path is in t.TempDir().
func testConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	return Config{
		Node:     "n1",
		Fabric:   "ib-a",
		CacheDir: filepath.Join(dir, "cache"),
		StateDir: filepath.Join(dir, "state"),
		// Never the host's /run/llmgw: the agent watches its job records.
		RunDir:  filepath.Join(dir, "run"),
		Socket:  filepath.Join(dir, "agent.sock"),
		Version: "test",
	}
}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("LLMGW_TEST_LOG") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

func newTestAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	a.debounce = 20 * time.Millisecond
	a.backoffBase = 20 * time.Millisecond
	a.backoffCap = 100 * time.Millisecond
	a.notifySocket = ""
	lockDir := filepath.Join(t.TempDir(), "locks")
	a.configureFetch = func(f *fetch.Fetcher) {
		f.LockDir = lockDir
		f.ProgressInterval = 20 * time.Millisecond
		f.RetryWait = 10 * time.Millisecond
		f.Retries = 1
	}
	return a
}

// start runs a until the test ends and returns a client for its socket and
// stop, which ends Run as SIGTERM does and returns what Run returned.
func start(t *testing.T, a *Agent) (*api.LocalClient, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				runErr = errors.New("agent did not stop within 15s of its context ending")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	lc := &api.LocalClient{Socket: a.Config().Socket}
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("agent stopped at start: %v", err)
		default:
		}
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_, err := lc.Status(sctx)
		c()
		if err == nil {
			return lc, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent socket never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	// The start of a whole file of its format: the scan reads it.
	switch {
	case strings.HasSuffix(path, ".gguf") && size >= 24:
		f.WriteAt([]byte("GGUF\x03\x00\x00\x00"), 0)
	case strings.HasSuffix(path, ".safetensors") && size >= 10:
		f.WriteAt(append(binary.LittleEndian.AppendUint64(nil, uint64(size-8)), "{}"...), 0)
		f.WriteAt(bytes.Repeat([]byte(" "), int(size-10)), 10)
	}
	f.Close()
	// A finished file: the scan takes one modified within seconds as still
	// being written.
	then := time.Now().Add(-time.Minute)
	os.Chtimes(path, then, then)
}

func TestReportContent(t *testing.T) {
	fc := newFakeCoord(t)
	fc.models = []api.Model{{Name: "llama", Source: "hf:org/repo/llama.gguf", Size: 1 << 20}}
	weightsDir := t.TempDir()
	writeFile(t, filepath.Join(weightsDir, "m.gguf"), 1<<20)
	writeFile(t, filepath.Join(weightsDir, "qwen", "model.safetensors"), 3000)
	writeFile(t, filepath.Join(weightsDir, "notes.txt"), 10)

	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.WeightDirs = []string{weightsDir}
	cfg.TokenFile = filepath.Join(t.TempDir(), "token")
	os.WriteFile(cfg.TokenFile, []byte("s3cret\n"), 0o600)
	a := newTestAgent(t, cfg)

	r, sent, err := a.Once(context.Background())
	if err != nil || !sent {
		t.Fatalf("Once: sent=%v err=%v", sent, err)
	}
	got := fc.next(t, time.Second, nil)
	if got.ID != r.ID || got.Seq != 1 {
		t.Errorf("coordinator got report %s seq %d, Once returned %s seq %d", got.ID, got.Seq, r.ID, r.Seq)
	}
	if _, err := uuid.Parse(got.ID); err != nil {
		t.Errorf("report id %q is not a UUID: %v", got.ID, err)
	}
	if got.Node != "n1" || got.Fabric != "ib-a" || !got.Looked || got.AgentVersion != "test" {
		t.Errorf("report header = node %q fabric %q looked %v version %q", got.Node, got.Fabric, got.Looked, got.AgentVersion)
	}
	want := map[string]int64{filepath.Join(weightsDir, "m.gguf"): 1 << 20, filepath.Join(weightsDir, "qwen"): 3000}
	if len(got.Weights) != len(want) {
		t.Fatalf("weights = %+v, want %v", got.Weights, want)
	}
	for _, w := range got.Weights {
		if want[w.Path] != w.Size || !w.Complete || w.Shared {
			t.Errorf("weight %+v, want size %d, complete, local", w, want[w.Path])
		}
	}
	if len(got.Dirs) != 2 || got.Dirs[0].Path != weightsDir || got.Dirs[1].Path != cfg.CacheDir || !got.Dirs[1].Missing {
		t.Errorf("dirs = %+v, want the weight dir, then the cache dir (missing)", got.Dirs)
	}
	if got.Cache.Dir != cfg.CacheDir || got.Cache.TotalBytes <= 0 || got.Cache.FreeBytes <= 0 || got.Cache.FreeBytes > got.Cache.TotalBytes {
		t.Errorf("cache = %+v, want the room of the cache dir's filesystem", got.Cache)
	}
	if got.Started.IsZero() || got.Time.Before(got.Started) {
		t.Errorf("started %v, time %v", got.Started, got.Time)
	}
	if fc.auth[0] != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want the token from the file", fc.auth[0])
	}

	// The catalog copy was written, atomically, and reads back.
	cp, err := catalog.ReadCopy(filepath.Join(cfg.StateDir, "catalog.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := cp.Lookup("llama"); !ok || m.Source != "hf:org/repo/llama.gguf" || cp.Coordinator != fc.srv.URL || cp.Fetched.IsZero() {
		t.Errorf("catalog copy = %+v", cp)
	}
	leftovers, _ := filepath.Glob(filepath.Join(cfg.StateDir, ".catalog.json.tmp-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// A catalog answer that is not JSON keeps the last good copy.
	fc.mu.Lock()
	fc.garbage = true
	fc.mu.Unlock()
	if _, _, err := a.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	cp2, err := catalog.ReadCopy(filepath.Join(cfg.StateDir, "catalog.json"))
	if err != nil || len(cp2.Models) != 1 || !cp2.Fetched.Equal(cp.Fetched) {
		t.Errorf("after a bad catalog answer the copy is %+v, %v; want the previous one", cp2, err)
	}
	if st := a.Status(); st.Catalog.Error == "" || st.Catalog.Models != 1 {
		t.Errorf("status catalog = %+v, want the error and the kept copy", st.Catalog)
	}
	r3, _, _ := a.Once(context.Background())
	if r3.Seq != 3 || !strings.Contains(strings.Join(r3.Errors, "\n"), "catalog") {
		t.Errorf("third report seq %d errors %q; want seq 3 and the catalog error", r3.Seq, r3.Errors)
	}
}

// TestNoDirsRanksLikeEmptyDir holds the property the whole feature rests
// on: a node never told to look reports exactly what a node that looked
// and found nothing reports, in everything placement reads (its weights and
// its cache), so that enabling the feature on one node cannot push jobs off
// the others. Only Looked, and the list of directories, may differ.
func TestNoDirsRanksLikeEmptyDir(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	report := func(dirs []string) api.Report {
		cfg := testConfig(t)
		cfg.CacheDir = cache
		cfg.WeightDirs = dirs
		r, _, err := newTestAgent(t, cfg).Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return *r
	}
	none := report(nil)
	empty := report([]string{t.TempDir()})

	if none.Looked || !empty.Looked {
		t.Errorf("Looked: no dirs %v, empty dir %v; want false, true", none.Looked, empty.Looked)
	}
	for name, r := range map[string]api.Report{"no dirs": none, "empty dir": empty} {
		if r.Weights == nil || len(r.Weights) != 0 {
			t.Errorf("%s: weights = %#v, want an empty list", name, r.Weights)
		}
	}
	// What ranking reads must be identical, byte for byte on the wire.
	rankView := func(r api.Report) string {
		b, _ := json.Marshal(struct {
			W []api.Weight
			C api.Cache
			F []api.Fetch
		}{r.Weights, api.Cache{Dir: r.Cache.Dir, TotalBytes: r.Cache.TotalBytes}, r.Fetches})
		return string(b)
	}
	if rankView(none) != rankView(empty) {
		t.Errorf("ranking inputs differ:\n no dirs:   %s\n empty dir: %s", rankView(none), rankView(empty))
	}
	// And nothing else differs but the fields that must.
	strip := func(r api.Report) string {
		r.ID, r.Seq, r.Time, r.Started, r.Looked, r.Dirs = "", 0, time.Time{}, time.Time{}, false, nil
		r.Cache.FreeBytes = 0 // other tests write to the same filesystem
		b, _ := json.Marshal(r)
		return string(b)
	}
	if strip(none) != strip(empty) {
		t.Errorf("reports differ beyond Looked and Dirs:\n no dirs:   %s\n empty dir: %s", strip(none), strip(empty))
	}
}

func TestReportAtOnceAfterWeightsChange(t *testing.T) {
	fc := newFakeCoord(t)
	dir := t.TempDir()
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.WeightDirs = []string{dir}
	cfg.ReportInterval = time.Hour
	cfg.ScanInterval = time.Second
	a := newTestAgent(t, cfg)
	start(t, a)

	first := fc.next(t, 5*time.Second, nil)
	if len(first.Weights) != 0 {
		t.Fatalf("first report has weights %+v", first.Weights)
	}
	writeFile(t, filepath.Join(dir, "new.gguf"), 4096)
	t0 := time.Now()
	r := fc.next(t, 5*time.Second, func(r api.Report) bool { return len(r.Weights) == 1 })
	if r.Weights[0].Path != filepath.Join(dir, "new.gguf") || r.Seq <= first.Seq {
		t.Errorf("report after the change: seq %d weights %+v", r.Seq, r.Weights)
	}
	if took := time.Since(t0); took > 3*time.Second {
		t.Errorf("the change was reported after %s; want about one scan interval, not the report interval", took)
	}
}

// TestCoordinatorFailures runs the agent against a coordinator that answers
// 500, then 401, then HTML, then hangs up, then works: the agent keeps
// serving its socket throughout, counts each failure, and the report that
// finally gets through says what happened.
func TestCoordinatorFailures(t *testing.T) {
	fc := newFakeCoord(t)
	fc.script("500", "401", "garbage", "hangup")
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.ReportInterval = time.Second
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)

	r := fc.next(t, 10*time.Second, nil)
	if r.Seq != 5 {
		t.Errorf("first delivered report has seq %d, want 5 (four failed attempts before it)", r.Seq)
	}
	joined := strings.Join(r.Errors, "\n")
	for _, want := range []string{"database is locked", "unknown token", "not the JSON expected", "EOF"} {
		if !strings.Contains(joined, want) {
			t.Errorf("delivered report's errors lack %q:\n%s", want, joined)
		}
	}
	var st api.AgentStatus
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if st, err = lc.Status(context.Background()); err != nil {
			t.Fatalf("socket stopped answering: %v", err)
		}
		if st.LastReport.OK || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !st.LastReport.OK || st.LastReport.LastOK.IsZero() {
		t.Errorf("status last report = %+v, want ok", st.LastReport)
	}
	for result, want := range map[string]float64{resultServerError: 1, resultRejected: 1, resultBadAnswer: 1, resultUnreachable: 1, resultOK: 1} {
		// ok may already have counted the next periodic report.
		if got := testutil.ToFloat64(a.metrics.reports.WithLabelValues(result)); got != want && !(result == resultOK && got > want) {
			t.Errorf("reports_total{result=%q} = %v, want %v", result, got, want)
		}
	}

	// Now the coordinator goes away for good: the socket still answers and
	// status says why reports are not getting through.
	fc.srv.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := lc.Status(context.Background())
		if err != nil {
			t.Fatalf("socket stopped answering while the coordinator is down: %v", err)
		}
		if !st.LastReport.OK && st.LastReport.Error != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the failed report: %+v", st.LastReport)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReloadAppliesNewDirs(t *testing.T) {
	fc := newFakeCoord(t)
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.ReportInterval = time.Hour
	a := newTestAgent(t, cfg)
	start(t, a)
	if r := fc.next(t, 5*time.Second, nil); r.Looked {
		t.Fatalf("first report looked=%v", r.Looked)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.gguf"), 100)
	cfg.WeightDirs = []string{dir}
	cfg.Socket = filepath.Join(t.TempDir(), "other.sock") // needs a restart; ignored
	if err := a.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r := fc.next(t, 5*time.Second, func(r api.Report) bool { return r.Looked })
	if len(r.Weights) != 1 {
		t.Errorf("after reload: weights %+v", r.Weights)
	}
	if got := a.Config().Socket; got == cfg.Socket {
		t.Errorf("reload moved the socket to %s while running", got)
	}
	bad := cfg
	bad.Fabric = "a b"
	if err := a.Reload(bad); err == nil {
		t.Error("Reload accepted an invalid fabric")
	}
}

func TestSocket(t *testing.T) {
	t.Run("mode 0600 and a second agent refused", func(t *testing.T) {
		cfg := testConfig(t)
		a := newTestAgent(t, cfg)
		start(t, a)
		fi, err := os.Stat(cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
		}
		b := newTestAgent(t, cfg)
		err = b.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "another agent") {
			t.Errorf("second agent on one socket: %v, want 'another agent'", err)
		}
	})
	t.Run("stale socket replaced", func(t *testing.T) {
		cfg := testConfig(t)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close() // the file stays, nothing answers: a crashed agent's socket
		start(t, newTestAgent(t, cfg))
	})
	t.Run("a file in the way is not removed", func(t *testing.T) {
		cfg := testConfig(t)
		os.WriteFile(cfg.Socket, []byte("keep me"), 0o644)
		err := newTestAgent(t, cfg).Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("Run = %v, want 'not a socket'", err)
		}
		if b, _ := os.ReadFile(cfg.Socket); string(b) != "keep me" {
			t.Errorf("the file in the way was changed")
		}
	})
	t.Run("unknown endpoint", func(t *testing.T) {
		cfg := testConfig(t)
		start(t, newTestAgent(t, cfg))
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return net.Dial("unix", cfg.Socket)
		}}}
		resp, err := c.Get("http://agent/v1/nothing")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode != 404 || e.Code != api.CodeNotFound {
			t.Errorf("GET /v1/nothing = %d %+v", resp.StatusCode, e)
		}
	})
}

func TestMetricsLintAndServe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := testConfig(t)
	cfg.MetricsListen = addr
	cfg.WeightDirs = []string{t.TempDir()}
	a := newTestAgent(t, cfg)
	start(t, a)

	problems, err := testutil.GatherAndLint(a.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	// The socket answers before the first scan ends (start waits for the
	// socket), and the scan is counted when it ends: read until it is.
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(body, []byte("llmgw_agent_scan_duration_seconds_count 1")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{
		`llmgw_agent_info{version="test"} 1`,
		`llmgw_agent_weights{complete="true",kind="local"} 0`,
		`llmgw_agent_scan_duration_seconds_count 1`,
		`llmgw_agent_reports_total{result="ok"} 0`,
		"llmgw_agent_fetched_bytes_total 0",
		"llmgw_agent_fetch_errors_total 0",
		"llmgw_agent_last_report_success_timestamp_seconds 0",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestSdNotify(t *testing.T) {
	if sent, err := sdNotify("", "READY=1"); sent || err != nil {
		t.Errorf("sdNotify without NOTIFY_SOCKET = %v, %v; want a no-op", sent, err)
	}
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	cfg := testConfig(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "x.gguf"), 10)
	cfg.WeightDirs = []string{dir}
	a := newTestAgent(t, cfg)
	a.notifySocket = path
	_, stop := start(t, a)

	buf := make([]byte, 64)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("notify socket got %q, %v; want READY=1", buf[:n], err)
	}
	// READY comes after the first scan.
	if st := a.Status(); st.LastScan.IsZero() {
		t.Error("READY=1 was sent before the first scan finished")
	}
	if err := stop(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	n, err = conn.Read(buf)
	if err != nil || string(buf[:n]) != "STOPPING=1" {
		t.Errorf("notify socket got %q, %v; want STOPPING=1", buf[:n], err)
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after a clean stop: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	base, limit := 2*time.Second, 5*time.Minute
	prevMax := time.Duration(0)
	for n := 1; n <= 12; n++ {
		hi := min(base<<(n-1), limit)
		for range 50 {
			d := backoff(n, base, limit)
			if d < hi/2 || d > hi {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, hi/2, hi)
			}
		}
		if hi < prevMax {
			t.Fatalf("backoff bound shrank at %d", n)
		}
		prevMax = hi
	}
	for range 100 {
		if d := jitter(30 * time.Second); d < 27*time.Second || d > 33*time.Second {
			t.Fatalf("jitter(30s) = %s, want within ±10%%", d)
		}
	}
}

func TestErrorRing(t *testing.T) {
	var r errorRing
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.add(now, "a")
	r.add(now.Add(time.Second), "a")
	r.add(now, strings.Repeat("x", 1000))
	got := r.strings(now)
	if len(got) != 2 || !strings.Contains(got[0], "a (2 times since 2026-01-02T03:04:05Z)") || len(got[1]) > maxErrorLen+40 {
		t.Errorf("ring = %q", got)
	}
	for i := range 3 * maxErrors {
		r.add(now, string(rune('A'+i%26))+strings.Repeat("!", i))
	}
	if got := r.strings(now); len(got) != maxErrors {
		t.Errorf("ring holds %d entries, want %d", len(got), maxErrors)
	}
	if got := r.strings(now.Add(maxErrorAge + time.Second)); len(got) != 0 {
		t.Errorf("errors older than %s still reported: %q", maxErrorAge, got)
	}
}

func TestCacheRoomOfMissingDir(t *testing.T) {
	dir := t.TempDir()
	c, err := cacheRoom(filepath.Join(dir, "not", "yet"))
	if err != nil || c.TotalBytes <= 0 {
		t.Fatalf("cacheRoom(missing) = %+v, %v; want the parent filesystem's room", c, err)
	}
	p, _ := cacheRoom(dir)
	if p.TotalBytes != c.TotalBytes {
		t.Errorf("missing dir total %d, parent total %d", c.TotalBytes, p.TotalBytes)
	}
}
