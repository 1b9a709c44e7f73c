package agent

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

// TestGCThroughTheCoordinator runs a gc the way a cluster does: a real
// coordinator on 127.0.0.1 over a real database records the request and
// hands it to the agent in the answer to a report; the agent decides on its
// own files and posts its answer. Between them sits a proxy that plays a
// tampered coordinator and adds hostile names to what the node is asked.
func TestGCThroughTheCoordinator(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := coordinator.Tokens{Agent: "agent-secret", Admin: "admin-secret"}
	srv, err := coordinator.New(ctx, coordinator.Config{ReportInterval: 5 * time.Second}, tokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	coord := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { coord.Close(); srv.Close(); db.Close() })
	admin := &api.Client{BaseURL: coord.URL, Token: tokens.Admin}

	hostile := []string{"../etc/passwd", "/etc/passwd", "operator.gguf"}
	target, _ := url.Parse(coord.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
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

	wanted, gone, used := "https://o.example/m/wanted.gguf", "https://o.example/m/gone.gguf", "https://o.example/m/used.gguf"
	if _, err := admin.PutModel(ctx, api.Model{Name: "wanted", Source: wanted}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Coordinator = tampered.URL
	cfg.TokenFile = filepath.Join(t.TempDir(), "token")
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	os.WriteFile(cfg.TokenFile, []byte(tokens.Agent), 0o600)
	os.MkdirAll(cfg.CacheDir, 0o755)
	for _, src := range []string{wanted, gone, used} {
		writeFile(t, catalog.CachePathFor(cfg.CacheDir, src), 4096)
	}
	operator := filepath.Join(cfg.CacheDir, "operator.gguf")
	writeFile(t, operator, 4096)
	link := catalog.CachePathFor(cfg.CacheDir, "https://o.example/m/link.gguf")
	if err := os.Symlink(catalog.CachePathFor(cfg.CacheDir, used), link); err != nil {
		t.Fatal(err)
	}
	if err := catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: "77", Model: "used", Source: used,
		Path: catalog.CachePathFor(cfg.CacheDir, used), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	if _, sent, err := a.Once(ctx); !sent || err != nil {
		t.Fatalf("first report: sent=%v err=%v", sent, err)
	}
	st, err := admin.StartGC(ctx, api.GCRequest{Collect: true})
	if err != nil || len(st.Nodes) != 1 {
		t.Fatalf("StartGC = %+v, %v", st, err)
	}
	if _, sent, err := a.Once(ctx); !sent || err != nil {
		t.Fatalf("second report: sent=%v err=%v", sent, err)
	}
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
	for _, p := range []string{catalog.CachePathFor(cfg.CacheDir, wanted), catalog.CachePathFor(cfg.CacheDir, used), operator, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
	if _, err := os.Lstat(catalog.CachePathFor(cfg.CacheDir, gone)); !os.IsNotExist(err) {
		t.Errorf("the unwanted cache file is still there: %v", err)
	}
	// The next report no longer lists what was removed.
	r, _, _ := a.Once(ctx)
	for _, w := range r.Weights {
		if filepath.Base(w.Path) == catalog.CacheName(gone) {
			t.Errorf("the removed file is still reported: %+v", w)
		}
	}
}
