package agent

import (
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestJobStartsReported: a job record the Prolog leaves (the fast path's
// marked fast) reaches the next report as the job's start, warm or cold,
// once per job, and what prefetches fetched of its file counts as used.
func TestJobStartsReported(t *testing.T) {
	fc := newFakeCoord(t)
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.ReportInterval = time.Hour
	a := newTestAgent(t, cfg)
	start(t, a)
	fc.next(t, 5*time.Second, nil)
	a.prefetch.fetched(catalog.CacheName("http://o/m1.gguf"), 1000)
	now := time.Now().UTC()
	for _, r := range []catalog.JobRecord{
		{Job: "41", Model: "m1", Source: "http://o/m1.gguf", Path: "/c/m1.gguf", Time: now, Fast: true},
		{Job: "42", Model: "m2", Source: "http://o/m2.gguf", Path: "/c/m2.gguf", Time: now},
	} {
		if err := catalog.WriteJobRecord(cfg.RunDir, r); err != nil {
			t.Fatal(err)
		}
	}
	// A short job: its Epilog removes the record a few tens of
	// milliseconds after the Prolog wrote it.
	if err := catalog.WriteJobRecord(cfg.RunDir, catalog.JobRecord{Job: "43", Model: "m1", Source: "http://o/m1.gguf", Path: "/c/m1.gguf", Time: now, Fast: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if p, err := catalog.JobRecordPath(cfg.RunDir, "43"); err != nil || os.Remove(p) != nil {
		t.Fatalf("removing job 43's record: %v", err)
	}
	r := fc.next(t, 5*time.Second, func(r api.Report) bool { return len(r.Starts) == 3 })
	got := map[string]bool{}
	for _, s := range r.Starts {
		got[s.Job] = s.Warm
	}
	if !got["41"] || got["42"] || !got["43"] {
		t.Errorf("starts %+v; want 41 and 43 warm, 42 cold", r.Starts)
	}
	if v := testutil.ToFloat64(a.metrics.prefetchBytes.WithLabelValues("used")); v != 1000 {
		t.Errorf("prefetch used bytes %v; want the 1000 prefetched of m1, which job 41 started with", v)
	}
	if v := testutil.ToFloat64(a.metrics.jobStarts.WithLabelValues("warm")); v != 2 {
		t.Errorf("job_starts_total{start=warm} = %v; want 2", v)
	}
}
