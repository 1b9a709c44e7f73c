package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestGCCommand drives `llmgw gc` against a real coordinator with real
// agents (`llmgw agent --once`) reporting while it waits: n1 answers, n2
// never reports again and is named as not answering.
func TestGCCommand(t *testing.T) {
	dir := t.TempDir()
	coordURL, nodeTok, adminTok := testCoordinatorWith(t, func(c *coordinator.Config) { c.ReportInterval = time.Second })
	admin := map[string]string{"LLMGW_COORDINATOR": coordURL, "LLMGW_TOKEN_FILE": adminTok}

	kept, gone := "https://o.example/m/kept.gguf", "https://o.example/m/gone.gguf"
	for name, src := range map[string]string{"kept": kept, "gone": gone} {
		if code, _, errs := llmgwRun(t, admin, "models", "add", name, src); code != 0 {
			t.Fatalf("models add %s: %s", name, errs)
		}
	}
	nodeDir := func(node string) string { return filepath.Join(dir, node) }
	cacheOf := func(node string) string { return filepath.Join(nodeDir(node), "cache") }
	agentOnce := func(node string) {
		d := nodeDir(node)
		code, _, errs := llmgwRun(t, map[string]string{}, "agent", "--once", "--node", node, "--coordinator", coordURL,
			"--token-file", nodeTok(node), "--cache-dir", cacheOf(node), "--state-dir", d, "--run-dir", filepath.Join(d, "run"),
			"--socket", filepath.Join(d, "s"))
		if code != 0 {
			t.Errorf("agent --once %s: exit %d: %s", node, code, errs)
		}
	}
	os.MkdirAll(cacheOf("n1"), 0o755)
	for _, src := range []string{kept, gone} {
		os.WriteFile(catalog.CachePathFor(cacheOf("n1"), src), make([]byte, 2000), 0o644)
		fetchedLongAgo(t, catalog.CachePathFor(cacheOf("n1"), src))
	}
	operator := filepath.Join(cacheOf("n1"), "gone.gguf")
	os.WriteFile(operator, make([]byte, 2000), 0o644)
	agentOnce("n1")
	agentOnce("n2")
	if code, _, errs := llmgwRun(t, admin, "models", "rm", "gone"); code != 0 {
		t.Fatalf("models rm: %s", errs)
	}

	// gcWhile runs `llmgw gc args` while n1's agent keeps reporting.
	gcWhile := func(args ...string) (int, string, string) {
		type res struct {
			code      int
			out, errs string
		}
		done := make(chan res, 1)
		go func() {
			code, out, errs := llmgwRun(t, admin, append([]string{"gc"}, args...)...)
			done <- res{code, out, errs}
		}()
		for {
			select {
			case r := <-done:
				return r.code, r.out, r.errs
			case <-time.After(200 * time.Millisecond):
				agentOnce("n1")
			}
		}
	}

	start := time.Now()
	code, out, errs := gcWhile()
	t.Logf("llmgw gc (%.1fs):\n%s", time.Since(start).Seconds(), out)
	if code != 0 {
		t.Fatalf("gc: exit %d: %s", code, errs)
	}
	goneName := catalog.CacheName(gone)
	for _, want := range []string{"list only", "n1    1                1             0     0        2.0 kB", "would remove  " + goneName, "DID NOT ANSWER (1): n2", "no (no report before the deadline)"} {
		if !strings.Contains(out, want) {
			t.Errorf("gc output lacks %q", want)
		}
	}
	if strings.Contains(out, "  gone.gguf") || strings.Contains(out, catalog.CacheName(kept)) {
		t.Error("gc output names a file nobody asked about")
	}
	if _, err := os.Stat(catalog.CachePathFor(cacheOf("n1"), gone)); err != nil {
		t.Errorf("listing removed the file: %v", err)
	}
	// Waited for n2 up to two intervals and a grace, not much longer.
	if d := time.Since(start); d < 2*time.Second || d > 15*time.Second {
		t.Errorf("gc took %s; want about two report intervals plus %s", d, gcGrace)
	}

	start = time.Now()
	code, out, errs = gcWhile("--collect", "--node", "n1", "--json")
	if code != 0 {
		t.Fatalf("gc --collect: exit %d: %s", code, errs)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("gc --node n1 took %s although n1 answered at once", time.Since(start))
	}
	var st api.GCStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st.Nodes) != 1 || st.Nodes[0].Answer == nil {
		t.Fatalf("gc --json: %v:\n%s", err, out)
	}
	a := st.Nodes[0].Answer
	if len(a.Files) != 1 || a.Files[0].Action != "removed" || a.Freed != 2000 {
		t.Errorf("n1 answered %+v", a)
	}
	if _, err := os.Stat(catalog.CachePathFor(cacheOf("n1"), gone)); !os.IsNotExist(err) {
		t.Errorf("gc --collect left the file: %v", err)
	}
	for _, p := range []string{operator, catalog.CachePathFor(cacheOf("n1"), kept)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}

	for _, args := range [][]string{{"gc", "extra"}, {"gc", "--node", "../n1"}} {
		if code, _, _ := llmgwRun(t, admin, args...); code != 2 {
			t.Errorf("llmgw %q: exit %d, want 2", args, code)
		}
	}
	if code, _, errs := llmgwRun(t, admin, "gc", "--node", "n9"); code != 1 || !strings.Contains(errs, "never reported") {
		t.Errorf("gc --node n9: exit %d, %q", code, errs)
	}
}

// TestGCTamperedCoordinator: a real coordinator records a gc and hands it
// to the real agent (`llmgw agent --once`) in the answer to a report;
// between them a proxy plays a tampered coordinator and adds hostile names
// to what the node is asked. The node refuses them and says why, removes
// only the unwanted cache file, and keeps the file a running job uses, the
// operator's file and the symlink.
func TestGCTamperedCoordinator(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := coordinator.Tokens{Admin: "admin-secret"}
	srv, err := coordinator.New(ctx, coordinator.Config{ReportInterval: 5 * time.Second}, tokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	coord := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { coord.Close(); srv.Close(); db.Close() })
	admin := &api.Client{BaseURL: coord.URL, Token: tokens.Admin}

	hostile := []string{"../etc/passwd", "/etc/passwd", "operator.gguf"}
	tampered := tamperedCoordinator(t, coord.URL, hostile)

	wanted, gone, used := "https://o.example/m/wanted.gguf", "https://o.example/m/gone.gguf", "https://o.example/m/used.gguf"
	if _, err := admin.PutModel(ctx, api.Model{Name: "wanted", Source: wanted}); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	cacheDir, runDir := filepath.Join(base, "cache"), filepath.Join(base, "run")
	tokenFile := filepath.Join(base, "token")
	made, err := admin.NewNodeToken(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(tokenFile, []byte(made.Token), 0o600)
	os.MkdirAll(cacheDir, 0o755)
	for _, src := range []string{wanted, gone, used} {
		os.WriteFile(catalog.CachePathFor(cacheDir, src), make([]byte, 4096), 0o644)
		fetchedLongAgo(t, catalog.CachePathFor(cacheDir, src))
	}
	operator := filepath.Join(cacheDir, "operator.gguf")
	os.WriteFile(operator, make([]byte, 4096), 0o644)
	link := catalog.CachePathFor(cacheDir, "https://o.example/m/link.gguf")
	if err := os.Symlink(catalog.CachePathFor(cacheDir, used), link); err != nil {
		t.Fatal(err)
	}
	if err := catalog.WriteJobRecord(runDir, catalog.JobRecord{Job: "77", Model: "used", Source: used,
		Path: catalog.CachePathFor(cacheDir, used), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	once := func() api.Report {
		t.Helper()
		code, out, errs := llmgwRun(t, map[string]string{}, "agent", "--once", "--node", "n1", "--coordinator", tampered.URL,
			"--token-file", tokenFile, "--cache-dir", cacheDir, "--state-dir", base, "--run-dir", runDir, "--socket", filepath.Join(base, "s"))
		var r api.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("agent --once: exit %d: %s", code, errs)
		}
		return r
	}
	once()
	st, err := admin.StartGC(ctx, api.GCRequest{Collect: true})
	if err != nil || len(st.Nodes) != 1 {
		t.Fatalf("StartGC = %+v, %v", st, err)
	}
	once()
	got, err := admin.GC(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := got.Nodes[0]
	if n.Answer == nil {
		t.Fatalf("n1 did not answer: %+v", got)
	}
	actions := map[string]api.GCFile{}
	for _, f := range n.Answer.Files {
		actions[f.Name] = f
	}
	t.Logf("asked %q; answered %+v", n.Asked, n.Answer.Files)
	want := map[string]string{
		catalog.CacheName(gone): "removed",
		catalog.CacheName(used): "kept",
		"../etc/passwd":         "refused",
		"/etc/passwd":           "refused",
		"operator.gguf":         "refused",
	}
	for name, action := range want {
		if f, ok := actions[name]; !ok || f.Action != action {
			t.Errorf("%s: %+v, want %s", name, f, action)
		}
	}
	if f := actions[catalog.CacheName(used)]; !strings.Contains(f.Reason, "job 77") {
		t.Errorf("in-use file's reason %q does not name the job", f.Reason)
	}
	if n.Answer.Freed != 4096 {
		t.Errorf("freed %d, want 4096", n.Answer.Freed)
	}
	for _, p := range []string{catalog.CachePathFor(cacheDir, wanted), catalog.CachePathFor(cacheDir, used), operator, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
	if _, err := os.Lstat(catalog.CachePathFor(cacheDir, gone)); !os.IsNotExist(err) {
		t.Errorf("the unwanted cache file is still there: %v", err)
	}
	// The next report no longer lists what was removed.
	r := once()
	for _, w := range r.Weights {
		if filepath.Base(w.Path) == catalog.CacheName(gone) {
			t.Errorf("the removed file is still reported: %+v", w)
		}
	}
}

// tamperedCoordinator stands in front of the coordinator at target and
// adds hostile to every gc request it hands an agent in a report's answer:
// the coordinator a node must not trust blindly.
func tamperedCoordinator(t *testing.T, target string, hostile []string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/v1/reports" || resp.StatusCode != http.StatusAccepted {
			return nil
		}
		var ans api.ReportAnswer
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &ans); err != nil {
			return err
		}
		if ans.GC != nil {
			ans.GC.Remove = append(ans.GC.Remove, hostile...)
		}
		b, _ = json.Marshal(ans)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	tampered := httptest.NewServer(proxy)
	t.Cleanup(tampered.Close)
	return tampered
}

// fetchedLongAgo dates a cache file a day back: gc keeps what was fetched
// within the gc interval, and these stand for files fetched long ago.
func fetchedLongAgo(t *testing.T, p string) {
	t.Helper()
	long := time.Now().Add(-24 * time.Hour)
	if err := os.Chtimes(p, long, long); err != nil {
		t.Fatal(err)
	}
}

// TestGCOtherCoordinator: a node that collected against one coordinator's
// catalog is pointed at another (a fresh database: a reinstall, a wrong
// URL) whose catalog lacks a model the node holds. `llmgw gc --collect`
// there removes nothing and says why and how to override it; with
// --force it collects, and the node trusts that catalog from then on.
func TestGCOtherCoordinator(t *testing.T) {
	dir := t.TempDir()
	kept, gone := "https://o.example/m/kept.gguf", "https://o.example/m/gone.gguf"
	first, firstTok, firstAdmin := testCoordinatorWith(t, func(c *coordinator.Config) { c.ReportInterval = time.Second })
	other, otherTok, otherAdmin := testCoordinatorWith(t, func(c *coordinator.Config) { c.ReportInterval = time.Second })
	for _, add := range []struct{ url, tok, name, src string }{
		{first, firstAdmin, "kept", kept}, {first, firstAdmin, "gone", gone}, {other, otherAdmin, "kept", kept},
	} {
		if code, _, errs := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": add.url, "LLMGW_TOKEN_FILE": add.tok}, "models", "add", add.name, add.src); code != 0 {
			t.Fatalf("models add %s: %s", add.name, errs)
		}
	}
	cache := filepath.Join(dir, "cache")
	os.MkdirAll(cache, 0o755)
	for _, src := range []string{kept, gone} {
		os.WriteFile(catalog.CachePathFor(cache, src), make([]byte, 1000), 0o644)
		fetchedLongAgo(t, catalog.CachePathFor(cache, src))
	}
	// n1's token from the coordinator it reports to: each knows its own.
	tokens := map[string]func(string) string{first: firstTok, other: otherTok}
	agentOnce := func(coord string) {
		code, _, errs := llmgwRun(t, map[string]string{}, "agent", "--once", "--node", "n1", "--coordinator", coord,
			"--token-file", tokens[coord]("n1"), "--cache-dir", cache, "--state-dir", dir, "--run-dir", filepath.Join(dir, "run"),
			"--socket", filepath.Join(dir, "s"))
		if code != 0 {
			t.Fatalf("agent --once: exit %d: %s", code, errs)
		}
	}
	agentOnce(first)
	agentOnce(other)
	gcWhile := func(args ...string) string {
		done := make(chan string, 1)
		go func() {
			code, out, errs := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": other, "LLMGW_TOKEN_FILE": otherAdmin}, append([]string{"gc", "--node", "n1"}, args...)...)
			if code != 0 {
				t.Errorf("gc %q: exit %d: %s", args, code, errs)
			}
			done <- out
		}()
		for {
			select {
			case out := <-done:
				return out
			case <-time.After(200 * time.Millisecond):
				agentOnce(other)
			}
		}
	}
	gonePath := catalog.CachePathFor(cache, gone)
	out := gcWhile("--collect")
	if _, err := os.Stat(gonePath); err != nil {
		t.Fatalf("gc --collect against another coordinator's catalog removed %s: %v\n%s", gonePath, err, out)
	}
	for _, want := range []string{"another coordinator database", "--collect --force"} {
		if !strings.Contains(out, want) {
			t.Errorf("gc --collect output lacks %q:\n%s", want, out)
		}
	}
	out = gcWhile("--collect", "--force")
	if _, err := os.Stat(gonePath); !os.IsNotExist(err) {
		t.Errorf("gc --collect --force left %s: %v\n%s", gonePath, err, out)
	}
	if !strings.Contains(out, "forced") {
		t.Errorf("gc --collect --force output does not say it was forced:\n%s", out)
	}
	if _, err := os.Stat(catalog.CachePathFor(cache, kept)); err != nil {
		t.Errorf("the wanted file: %v", err)
	}
	cp, err := catalog.ReadCopy(filepath.Join(dir, "catalog.json"))
	if err != nil || cp.Distrust() != "" {
		t.Errorf("after a forced gc the node does not trust the catalog it was forced against: %v, %q", err, cp.Distrust())
	}
	if code, _, _ := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": other, "LLMGW_TOKEN_FILE": otherAdmin}, "gc", "--force"); code != 2 {
		t.Errorf("gc --force without --collect: exit %d, want 2", code)
	}
}
