package agent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// What a prefetch brought that no job has used is the first an eviction
// takes within its class: here before a wanted file a job used longer ago
// than the prefetch wrote its own, which plain least-recently-used would
// take first. The prefetch is no use of its file; a job's start on the
// fast path is (its record, read as it lands), and from then on the file
// is ordered by its use like any other.
func TestEvictionTakesWhatAPrefetchBroughtFirst(t *testing.T) {
	jobO, preO := newOrigin(t, 1<<20), newOrigin(t, 1<<20)
	jobSrc, preSrc := jobO.srv.URL+"/job.gguf", preO.srv.URL+"/pre.gguf"
	cfg := testConfig(t)
	// No coordinator to say which copies are the fabric's last: without
	// keep_last_copy_for every copy may go, so the order alone decides.
	cfg.KeepLastCopyFor = -1
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	models := []catalog.Model{{Name: "jobm", Source: jobSrc, Size: 1 << 20}, {Name: "prem", Source: preSrc, Size: 1 << 20}}
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Models: models}); err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	if _, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: jobSrc, Size: 1 << 20}, nil); err != nil {
		t.Fatal(err)
	}
	ask := api.PrefetchAsk{Model: "prem", Source: preSrc, Size: 1 << 20, Jobs: []string{"7"}, Start: time.Now().Add(time.Minute)}
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to be done", func() bool { return prefetchState(a, preSrc) == api.PrefetchDone })

	jobName, preName := catalog.CacheName(jobSrc), catalog.CacheName(preSrc)
	a.evict.mu.Lock()
	_, preUsed := a.evict.used[preName]
	_, prefetched := a.evict.prefetched[preName]
	// The job's file written three hours ago and used two hours ago; the
	// prefetched file written an hour ago: plain least-recently-used
	// takes the job's.
	a.evict.used[jobName] = time.Now().Add(-2 * time.Hour)
	a.evict.mu.Unlock()
	if preUsed || !prefetched {
		t.Fatalf("after the prefetch: noted used %v, noted prefetched %v; want a prefetch noted as such, not as a use", preUsed, prefetched)
	}
	for src, ago := range map[string]time.Duration{jobSrc: 3 * time.Hour, preSrc: time.Hour} {
		when := time.Now().Add(-ago)
		if err := os.Chtimes(catalog.CachePathFor(cfg.CacheDir, src), when, when); err != nil {
			t.Fatal(err)
		}
	}

	freed, held := a.evictNow(context.Background(), 1, "fetch")
	_, preErr := os.Stat(catalog.CachePathFor(cfg.CacheDir, preSrc))
	_, jobErr := os.Stat(catalog.CachePathFor(cfg.CacheDir, jobSrc))
	if freed != 1<<20 || preErr == nil || jobErr != nil {
		t.Fatalf("eviction of one file freed %d (%s): prefetched file %v, job's file %v; want the prefetched one gone and the job's kept", freed, held, preErr, jobErr)
	}
	ev := a.evict.recent[len(a.evict.recent)-1]
	if ev.Name != preName || !strings.Contains(ev.Reason, "a prefetch brought it and no job used it") {
		t.Errorf("the eviction said %+v; want the prefetched file, saying a prefetch brought it", ev)
	}

	// Prefetched again, then a job starts with it on the fast path: a use.
	ask.Jobs = []string{"8"}
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{}, Lease: 60}, time.Now())
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	waitUntil(t, "the second prefetch to be done", func() bool {
		_, err := os.Stat(catalog.CachePathFor(cfg.CacheDir, preSrc))
		return err == nil && prefetchState(a, preSrc) == api.PrefetchDone
	})
	rec := catalog.JobRecord{Job: "8", Model: "prem", Source: preSrc, Path: catalog.CachePathFor(cfg.CacheDir, preSrc), Time: time.Now().UTC(), Fast: true}
	if err := catalog.WriteJobRecord(cfg.RunDir, rec); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the job's start to count as a use", func() bool {
		a.evict.mu.Lock()
		defer a.evict.mu.Unlock()
		_, pre := a.evict.prefetched[preName]
		_, used := a.evict.used[preName]
		return used && !pre
	})
}
