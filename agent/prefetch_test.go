package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/evict"
)

func prefetchState(a *Agent, source string) string {
	sts, _ := a.prefetch.states()
	for _, s := range sts {
		if s.Source == source {
			return s.State
		}
	}
	return ""
}

func askFor(o *origin, name string, start time.Time) api.PrefetchAsk {
	return api.PrefetchAsk{Model: name, Source: o.srv.URL + "/" + name + ".gguf", Size: int64(len(o.data)), Jobs: []string{"1"}, Start: start}
}

func originRanges(o *origin) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ranges)
}

// A job's fetch of another source stops the running prefetch before it
// starts and the prefetch resumes from its .part once the job's fetch is
// done; the .part is never thrown away.
func TestPrefetchYieldsToAJobAndResumes(t *testing.T) {
	pre := newOrigin(t, 1<<20)
	pre.holdAt = 256 << 10
	job := newOrigin(t, 1<<20)
	a := newTestAgent(t, testConfig(t))
	lc, _ := start(t, a)
	ask := askFor(pre, "pre", time.Now().Add(time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to be under way", func() bool { return flightWaiters(a, ask.Source) == 1 && pre.gets.Load() == 1 })
	fetches := a.fetchesNow(time.Now())
	waitUntil(t, "the prefetch to move bytes", func() bool {
		fetches = a.fetchesNow(time.Now())
		return len(fetches) == 1 && fetches[0].Done > 0
	})
	if !fetches[0].Prefetch {
		t.Errorf("a fetch only a prefetch waits for reads %+v; want Prefetch set", fetches[0])
	}

	jobSource := job.srv.URL + "/job.gguf"
	done := make(chan error, 1)
	go func() {
		_, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: jobSource, Size: int64(len(job.data))}, nil)
		done <- err
	}()
	waitUntil(t, "the prefetch to stop for the job", func() bool { return flightWaiters(a, ask.Source) == 0 })
	if s := prefetchState(a, ask.Source); s != api.PrefetchPaused {
		t.Errorf("prefetch state while a job fetches: %q; want %q", s, api.PrefetchPaused)
	}
	part := catalog.CachePathFor(a.Config().CacheDir, ask.Source) + catalog.PartSuffix
	if st, err := os.Stat(part); err != nil || st.Size() == 0 {
		t.Fatalf("the paused prefetch's .part: %v, %v; want its bytes kept", st, err)
	}
	for _, f := range a.fetchesNow(time.Now()) {
		if f.Source == ask.Source {
			t.Errorf("the prefetch still fetches beside the job: %+v", f)
		}
		if f.Source == jobSource && f.Prefetch {
			t.Errorf("the job's fetch is marked a prefetch: %+v", f)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the job's ensure: %v", err)
	}
	close(pre.resume)
	waitUntil(t, "the prefetch to finish after the job", func() bool { return prefetchState(a, ask.Source) == api.PrefetchDone })
	resumed := false
	for _, r := range originRanges(pre) {
		if strings.HasPrefix(r, "bytes=") && !strings.HasPrefix(r, "bytes=0-") {
			resumed = true
		}
	}
	if !resumed {
		t.Errorf("the prefetch did not resume from its .part: ranges asked %q", originRanges(pre))
	}
	if got, err := os.ReadFile(catalog.CachePathFor(a.Config().CacheDir, ask.Source)); err != nil || len(got) != len(pre.data) {
		t.Errorf("prefetched file: %d bytes, %v", len(got), err)
	}
	if v := testutil.ToFloat64(a.metrics.prefetchBytes.WithLabelValues("fetched")); v <= 0 {
		t.Errorf("prefetch_bytes_total{use=fetched} = %v; want the prefetch's bytes", v)
	}
}

// A job that wants the source a prefetch is fetching joins that fetch: one
// GET, and what the prefetch fetched is counted used.
func TestAJobJoinsThePrefetchOfItsSource(t *testing.T) {
	o := newOrigin(t, 1<<20)
	o.holdAt = 256 << 10
	a := newTestAgent(t, testConfig(t))
	lc, _ := start(t, a)
	ask := askFor(o, "m", time.Now().Add(time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to move bytes", func() bool {
		fs := a.fetchesNow(time.Now())
		return len(fs) == 1 && fs[0].Done > 0
	})
	done := make(chan error, 1)
	go func() {
		_, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: ask.Source, Size: ask.Size}, nil)
		done <- err
	}()
	waitUntil(t, "the job to join the prefetch", func() bool { return flightWaiters(a, ask.Source) == 2 })
	if fs := a.fetchesNow(time.Now()); len(fs) != 1 || fs[0].Prefetch {
		t.Errorf("fetches once a job waits: %+v; want one, not marked a prefetch", fs)
	}
	close(o.resume)
	if err := <-done; err != nil {
		t.Fatalf("the job's ensure: %v", err)
	}
	if n := o.gets.Load(); n != 1 {
		t.Errorf("origin answered %d GETs; want 1 (the job joined the prefetch's fetch)", n)
	}
	if v := testutil.ToFloat64(a.metrics.prefetchBytes.WithLabelValues("used")); v <= 0 {
		t.Errorf("prefetch_bytes_total{use=used} = %v; want the prefetched bytes the job used", v)
	}
}

// A list that no longer names a prefetch cancels it, keeping its bytes; a
// later ask resumes it.
func TestPrefetchCancelledWhenNoLongerAsked(t *testing.T) {
	o := newOrigin(t, 1<<20)
	o.stallAfter = 256 << 10
	a := newTestAgent(t, testConfig(t))
	start(t, a)
	ask := askFor(o, "m", time.Now().Add(time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	part := catalog.CachePathFor(a.Config().CacheDir, ask.Source) + catalog.PartSuffix
	waitUntil(t, "the prefetch to write bytes", func() bool {
		st, err := os.Stat(part)
		return err == nil && st.Size() > 0
	})
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to stop", func() bool { return flightWaiters(a, ask.Source) == 0 })
	if sts, _ := a.prefetch.states(); len(sts) != 0 {
		t.Errorf("states after the list dropped it: %+v; want none", sts)
	}
	if st, err := os.Stat(part); err != nil || st.Size() == 0 {
		t.Fatalf("the cancelled prefetch's .part: %v, %v; want its bytes kept", st, err)
	}
}

// A prefetch the cache has no room for does not start, and one whose lease
// ran out without a new list is dropped.
func TestPrefetchNoRoomAndLease(t *testing.T) {
	o := newOrigin(t, 1<<20)
	a := newTestAgent(t, testConfig(t))
	a.prefetch.room = func(context.Context, int64, evict.Priority) (int64, bool, string, error) {
		return 0, false, "a stand-in budget with no room", nil
	}
	start(t, a)
	ask := askFor(o, "m", time.Now().Add(time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 2}, time.Now())
	waitUntil(t, "the prefetch to find no room", func() bool { return prefetchState(a, ask.Source) == api.PrefetchNoRoom })
	if n := o.gets.Load(); n != 0 {
		t.Errorf("origin answered %d GETs for a prefetch without room", n)
	}
	waitUntil(t, "the lease to end the list", func() bool { return prefetchState(a, ask.Source) == "" })
}

// A prefetch is held to the cache's budget at prefetch priority (Room at
// evict.Prefetch: the room below cache_low, counting what the cache
// holds), on a real 120 MiB ext4 filesystem: one that the free space
// would take but that would carry the cache past cache_low waits as
// no-room, reads nothing from its origin and evicts nothing; a smaller
// one goes. Before, the prefetch looked at the free space alone and took
// the first.
func TestPrefetchHeldToTheCacheBudget(t *testing.T) {
	cfg := testConfig(t)
	cfg.CacheDir = filepath.Join(loopfs.Mount(t, 120), "cache")
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	held := newOrigin(t, 60<<20)
	heldSrc := held.srv.URL + "/held.gguf"
	if _, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: heldSrc, Size: int64(len(held.data))}, nil); err != nil {
		t.Fatalf("a job's fetch of 60 MiB: %v", err)
	}
	b, err := a.budgetNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	big, small := newOrigin(t, 30<<20), newOrigin(t, 8<<20)
	if room := b.Room(evict.Prefetch); room >= int64(len(big.data)) || room < int64(len(small.data)) || b.Free-b.Reserve < int64(len(big.data)) {
		t.Fatalf("the filesystem is not as the test needs it: %+v, room below cache_low %d", b, room)
	}

	ask := askFor(big, "big", time.Now().Add(time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch to find no room", func() bool { return prefetchState(a, ask.Source) == api.PrefetchNoRoom })
	sts, _ := a.prefetch.states()
	if len(sts) != 1 || !strings.Contains(sts[0].Error, "cache_low") {
		t.Errorf("the no-room prefetch's state %+v; want its error to name cache_low", sts)
	}
	if n := big.gets.Load(); n != 0 {
		t.Errorf("the origin answered %d GETs for a prefetch the budget has no room for", n)
	}
	if _, err := os.Stat(catalog.CachePathFor(cfg.CacheDir, heldSrc)); err != nil {
		t.Errorf("the job's file: %v; a prefetch evicts nothing", err)
	}

	ask2 := askFor(small, "small", time.Now().Add(2*time.Minute))
	a.prefetch.set(&api.PrefetchList{Asks: []api.PrefetchAsk{ask, ask2}, Lease: 60}, time.Now())
	waitUntil(t, "the prefetch that fits to be done", func() bool { return prefetchState(a, ask2.Source) == api.PrefetchDone })
	if s := prefetchState(a, ask.Source); s != api.PrefetchNoRoom {
		t.Errorf("the prefetch that does not fit: %q; want still %q", s, api.PrefetchNoRoom)
	}
	if _, err := os.Stat(catalog.CachePathFor(cfg.CacheDir, heldSrc)); err != nil {
		t.Errorf("the job's file: %v; a prefetch evicts nothing", err)
	}
}
