package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
	"github.com/llmgw/llmgw/weights/hub"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// A Hub model and a model of several files are prefetched whole, through
// the ensure a Prolog's slow path uses, as the node's catalog copy has
// them: the Hub model's snapshot with its refs in the Hugging Face cache,
// the set's manifest and every file in its set directory. Both are then
// what the fast path takes, and both are recorded as prefetched for
// eviction. Before, the Hub model's ask failed (an ensure of one file
// from a source naming a repository) and the set's fetched its first file
// alone, into the top of the cache, where no job looks.
func TestPrefetchAHubModelAndASet(t *testing.T) {
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
	o := newOrigin(t, 256<<10)
	pair := catalog.Model{Name: "pair", Files: []catalog.File{
		{Source: o.srv.URL + "/pair-00001-of-00002.gguf", Size: int64(len(o.data))},
		{Source: o.srv.URL + "/pair-00002-of-00002.gguf", Size: int64(len(o.data))},
	}}
	pair.Source = pair.Files[0].Source
	tiny := catalog.Model{Name: "tiny", Source: catalog.HubSource(hb.Repo, hb.Commit), Hub: &hb, Size: catalog.HubSize(hb)}

	cfg := testConfig(t)
	cfg.HFEndpoint = h.URL
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{tiny, pair}}); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	start(t, a)
	asks := []api.PrefetchAsk{
		{Model: "tiny", Source: tiny.Source, Size: tiny.Size, Jobs: []string{"1"}, Start: time.Now().Add(time.Minute)},
		{Model: "pair", Source: pair.Source, Size: 2 * int64(len(o.data)), Jobs: []string{"2"}, Start: time.Now().Add(2 * time.Minute)},
	}
	a.prefetch.set(&api.PrefetchList{Asks: asks, Lease: 60}, time.Now())
	waitUntil(t, "both prefetches to be done", func() bool {
		return prefetchState(a, tiny.Source) == api.PrefetchDone && prefetchState(a, pair.Source) == api.PrefetchDone
	})

	hf := a.Config().HFCacheDir()
	for _, f := range hb.Files {
		if st, err := os.Stat(catalog.HubFilePath(hf, hb.Repo, hb.Commit, f.Path)); err != nil || st.Size() != f.Size {
			t.Errorf("the Hub model's %s in its snapshot: %v", f.Path, err)
		}
	}
	for _, ref := range catalog.HubRefs(hb) {
		if got, err := catalog.ReadHubRef(catalog.HubRefPath(hf, hb.Repo, ref)); err != nil || got != hb.Commit {
			t.Errorf("refs/%s: %q, %v; want the commit", ref, got, err)
		}
	}
	dir := filepath.Join(cfg.CacheDir, catalog.SetName(pair))
	if _, err := catalog.ReadManifest(dir); err != nil {
		t.Errorf("the set's manifest: %v", err)
	}
	for _, f := range pair.Files {
		if st, err := os.Stat(catalog.SetFilePath(dir, f.Source)); err != nil || st.Size() != f.Size {
			t.Errorf("the set's %s: %v", catalog.FileName(f.Source), err)
		}
	}
	if _, err := os.Stat(catalog.CachePathFor(cfg.CacheDir, pair.Source)); err == nil {
		t.Errorf("the set's first file was fetched into the top of the cache too")
	}
	sts, _ := a.prefetch.states()
	for _, s := range sts {
		if s.Done != s.Total || s.Error != "" {
			t.Errorf("state %+v; want done with every byte", s)
		}
	}
	a.evict.mu.Lock()
	_, hubPre := a.evict.prefetched[gc.HubEntryName(hb.Repo, hb.Commit)]
	_, setPre := a.evict.prefetched[catalog.SetName(pair)]
	a.evict.mu.Unlock()
	if !hubPre || !setPre {
		t.Errorf("recorded as prefetched: Hub snapshot %v, set %v; want both", hubPre, setPre)
	}
	if v := testutil.ToFloat64(a.metrics.prefetchBytes.WithLabelValues("fetched")); v < float64(tiny.Size+asks[1].Size) {
		t.Errorf("prefetch_bytes_total{use=fetched} = %v; want both models' %d bytes", v, tiny.Size+asks[1].Size)
	}
}

// A Hugging Face cache on another filesystem than the cache is not
// prefetched into: the budget a prefetch keeps to is the cache's. The
// prefetch says so in its state, and fetches nothing.
func TestPrefetchHubElsewhereSaysWhy(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "llmgw-hf-")
	if err != nil {
		t.Skipf("no /dev/shm for a second filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
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
	cfg.HFEndpoint, cfg.HFCache = h.URL, filepath.Join(other, "hub")
	os.MkdirAll(cfg.CacheDir, 0o755)
	if sameDev(t, other, cfg.CacheDir) {
		t.Skip("/dev/shm is on the same filesystem as the test's cache")
	}
	tiny := catalog.Model{Name: "tiny", Source: catalog.HubSource(hb.Repo, hb.Commit), Hub: &hb, Size: catalog.HubSize(hb)}
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: []catalog.Model{tiny}}); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	start(t, a)
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{{Model: "tiny", Source: tiny.Source, Size: tiny.Size, Jobs: []string{"1"}}}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to say no room", func() bool { return prefetchState(a, tiny.Source) == api.PrefetchNoRoom })
	sts, _ := a.prefetch.states()
	if len(sts) != 1 || !strings.Contains(sts[0].Error, "another filesystem") {
		t.Errorf("state %+v; want it to say the Hugging Face cache is on another filesystem", sts)
	}
	if n := h.Served(); n != 0 {
		t.Errorf("%d bytes fetched from the Hub for a prefetch that cannot be made", n)
	}
}
