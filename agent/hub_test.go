package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
