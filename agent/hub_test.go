package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// TestEnsureHub: the agent fetches a Hub model as one ensure, into the
// node's Hugging Face cache (the mirror agent.toml names), streams the
// model's progress as one figure, and scans the snapshot as the model,
// judged by the catalog's list; a request whose source is not the model's,
// or whose list would write outside the cache, is refused.
func TestEnsureHub(t *testing.T) {
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Commit("org/tiny", "main", map[string][]byte{"config.json": []byte("{}"), "model.safetensors": safetensorsBytes(300 << 10)})
	hb, _, err := (&hub.Client{Endpoint: h.URL}).Model(context.Background(), "org/tiny", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.HFEndpoint = h.URL
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	src := catalog.HubSource(hb.Repo, hb.Commit)
	var last api.Fetch
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := lc.Ensure(ctx, api.EnsureRequest{Source: src, Hub: &hb}, func(f api.Fetch) { last = f })
	snap := catalog.HubSnapshotDir(a.Config().HFCacheDir(), hb.Repo, hb.Commit)
	if err != nil || p != snap {
		t.Fatalf("Ensure = %q, %v; want %s", p, err, snap)
	}
	if last.Source != src || last.Total != catalog.HubSize(hb) {
		t.Errorf("last progress %+v; want the model's, %d bytes", last, catalog.HubSize(hb))
	}
	// The scan reports the snapshot, complete by the catalog's list.
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{{Name: "tiny", Source: src, Hub: &hb}}}); err != nil {
		t.Fatal(err)
	}
	a.scan(context.Background())
	found := false
	for _, w := range a.inv.Weights {
		if w.Path == snap {
			found = w.Complete && w.ModelID == "org/tiny" && w.Revision == hb.Commit
		}
	}
	if !found {
		t.Errorf("the scan does not report %s complete: %+v", snap, a.inv.Weights)
	}

	for name, req := range map[string]api.EnsureRequest{
		"another source": {Source: "hf:org/tiny@" + strings.Repeat("0", 40), Hub: &hb},
		"outside":        {Source: src, Hub: &catalog.Hub{Repo: hb.Repo, Revision: "main", Commit: hb.Commit, Files: []catalog.HubFile{{Path: "../../x.safetensors", Size: 1, Blob: strings.Repeat("1", 40)}}}},
	} {
		if _, err := lc.Ensure(context.Background(), req, nil); err == nil || !strings.Contains(err.Error(), "ensure request") {
			t.Errorf("%s: Ensure = %v; want the request refused", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(a.Config().HFCacheDir(), "x.safetensors")); err == nil {
		t.Error("a file was written outside the Hugging Face cache")
	}
}

// TestScanDirsHFCache: the Hugging Face cache is scanned, once, wherever
// agent.toml puts it.
func TestScanDirsHFCache(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{CacheDir: "/c"}, "/c"},
		{Config{CacheDir: "/c", HFCache: "/c/hub"}, "/c"},
		{Config{CacheDir: "/c", HFCache: "/shared/hf/hub"}, "/c /shared/hf/hub"},
		{Config{CacheDir: "/c", HFCache: "/w", WeightDirs: []string{"/w"}}, "/w /c"},
		{Config{CacheDir: "/c", HFCache: "/w/x/hub", WeightDirs: []string{"/w"}}, "/w /c /w/x/hub"},
	} {
		if got := strings.Join(scanDirs(tc.cfg), " "); got != tc.want {
			t.Errorf("scanDirs(%+v) = %s, want %s", tc.cfg, got, tc.want)
		}
	}
}

func safetensorsBytes(n int) []byte {
	b := make([]byte, n)
	b[0] = 8
	copy(b[8:], "{}      ")
	return b
}

// TestReportHFCacheRoom: an agent whose Hugging Face cache is on another
// filesystem than its cache reports that cache's room, for placement to
// check a Hub model's fetch against; only while its catalog holds a Hub
// model (a coordinator older than them decodes reports strictly and knows
// no such field), and never when the two share a filesystem.
func TestReportHFCacheRoom(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "llmgw-hf-")
	if err != nil {
		t.Skipf("no /dev/shm for a second filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	cfg := testConfig(t)
	os.MkdirAll(cfg.CacheDir, 0o755)
	if sameDev(t, other, cfg.CacheDir) {
		t.Skip("/dev/shm is on the same filesystem as the test's cache")
	}
	fc := newFakeCoord(t)
	cfg.Coordinator = fc.srv.URL
	cfg.HFCache = filepath.Join(other, "hub") // not made yet: its filesystem is its parent's
	a := newTestAgent(t, cfg)
	ctx := context.Background()
	send := func() api.Report {
		t.Helper()
		a.scan(ctx)
		if _, _, err := a.report(ctx); err != nil {
			t.Fatal(err)
		}
		return fc.next(t, 5*time.Second, nil)
	}
	if r := send(); r.HFCache != nil {
		t.Errorf("reported hf_cache %+v with no Hub model in the catalog", r.HFCache)
	}
	commit := strings.Repeat("c", 40)
	hb := catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit, Files: []catalog.HubFile{{Path: "model.safetensors", Size: 10, SHA256: strings.Repeat("a", 64)}}}
	fc.mu.Lock()
	fc.models = []api.Model{{Name: "tiny", Source: catalog.HubSource(hb.Repo, commit), Hub: &hb}}
	fc.mu.Unlock()
	send() // reads the catalog after it
	r := send()
	if r.HFCache == nil || r.HFCache.Dir != cfg.HFCache || r.HFCache.TotalBytes <= 0 || r.HFCache.TotalBytes == r.Cache.TotalBytes && r.HFCache.FreeBytes == r.Cache.FreeBytes {
		t.Errorf("hf_cache reported as %+v beside cache %+v; want %s's own room", r.HFCache, r.Cache, cfg.HFCache)
	}

	// The default, inside the cache: its room is the cache's.
	cfg.HFCache = ""
	a = newTestAgent(t, cfg)
	send()
	if r := send(); r.HFCache != nil {
		t.Errorf("reported hf_cache %+v for a Hugging Face cache inside the cache", r.HFCache)
	}
}

func sameDev(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		t.Fatalf("stat %s, %s", a, b)
	}
	return sa.Dev == sb.Dev
}
