package table

import (
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

func TestWritePrefetch(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := &api.Status{Generated: now, Prefetch: &api.PrefetchSummary{Interval: 5, Horizon: 1800, LastRead: now.Add(-2 * time.Second),
		CallsPerMinute: 12, WarmStarts: 3, ColdStarts: 1, Bytes: api.PrefetchBytes{Fetched: 2e9, Used: 1e9},
		Jobs: []api.PrefetchStatus{
			{Job: "12", Model: "m1", Nodes: "n[3-4]", Start: now.Add(80 * time.Second), State: api.PlanAsked, Done: 2e8, Total: 2e9,
				NodeStates: []string{"n3=fetching", "n4=paused"}},
			{Job: "13", Model: "m2\x1b[31m", Nodes: "n1", State: api.PlanHeld, Why: "starts in 2h0m0s, beyond the horizon of 30m0s", Warm: true},
		}}}
	var b strings.Builder
	if err := writePrefetch(&b, escaped(st)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"PREFETCH: backfill's plans read every 5s, last 2s ago; 12 calls to slurmctld in the last minute; horizon 30m0s",
		"starts: 3 warm, 1 cold",
		"12   m1",
		"n[3-4]", "in 1m20s", "asked", "n3=fetching n4=paused",
		"(warm wanted)", "beyond the horizon",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prefetch table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a control character reached the table:\n%q", out)
	}
	b.Reset()
	writePrefetch(&b, &api.Status{})
	if b.Len() != 0 {
		t.Errorf("with the prefetcher off the table says %q; want nothing", b.String())
	}
}
