package coordinator

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

func TestHearing(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &hearing{gap: 3 * time.Second}

	// Without beats (the loop not started) runs never see a pause: hearing
	// began at the first look.
	for _, s := range []float64{0, 10, 100} {
		if began, paused := h.since(at(s)); !began.Equal(at(0)) || paused != 0 {
			t.Fatalf("run at %v s without beats: began %v, paused %v; want t0, 0", s, began.Sub(t0), paused)
		}
	}

	h = &hearing{gap: 3 * time.Second}
	steps := []struct {
		at     float64
		beat   bool // else a run
		paused time.Duration
		began  float64
	}{
		{0, true, 0, 0},
		{0.75, true, 0, 0},
		{1.5, false, 0, 0},
		{2.25, true, 0, 0},
		{5.25, true, 0, 0}, // exactly gap: not a pause
		{9, true, 3750 * time.Millisecond, 9},
		{9.75, true, 0, 9},
		// Waking, the run comes first: it sees the pause, and the beat
		// after it does not again.
		{20, false, 10250 * time.Millisecond, 20},
		{20.1, true, 0, 20},
		{20.2, false, 0, 20},
		// A clock stepped back is no pause.
		{15, true, 0, 20},
		{15.75, true, 0, 20},
	}
	for _, st := range steps {
		var began time.Time
		var paused time.Duration
		if st.beat {
			paused = h.beat(at(st.at))
			began, _ = h.since(at(st.at))
		} else {
			began, paused = h.since(at(st.at))
		}
		if paused != st.paused || !began.Equal(at(st.began)) {
			what := "run"
			if st.beat {
				what = "beat"
			}
			t.Errorf("%s at %v s: paused %v, began at %v s; want %v, %v s", what, st.at, paused, began.Sub(t0).Seconds(), st.paused, st.began)
		}
	}
}

// TestFeaturesAfterPause: the reconciler's view of a node that reported
// just before the coordinator was stopped for longer than the stale
// window. At its first run after waking, before the queued reports are
// read, the node keeps its feature; a node that then stays quiet loses it
// one stale window after the wake.
func TestFeaturesAfterPause(t *testing.T) {
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens) // stale after 30 s
	ctx := t.Context()
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/models/llama"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.PostReport(ctx, report("n1", "ib-a", 1, api.Weight{Path: "/models/llama", Complete: true, Size: 1})); err != nil {
		t.Fatal(err)
	}
	h := &hearing{gap: e.srv.staleAfter / 2}
	for s := 0; s <= 10; s++ { // beating
		h.beat(t0.Add(time.Duration(s) * time.Second))
	}
	woke := t0.Add(50 * time.Second) // stopped from 10 s to 50 s
	since, paused := h.since(woke)
	if paused != 40*time.Second {
		t.Errorf("paused %v, want 40s", paused)
	}
	if got, _ := e.srv.desiredFeatures(woke, since); len(got["n1"]) != 1 {
		t.Errorf("at the wake: %v; n1 reported just before the pause and keeps llmgw.llama", got)
	}
	// What the run would have done without the pause seen: n1 is 50 s old.
	if got, _ := e.srv.desiredFeatures(woke, t0); len(got["n1"]) != 0 {
		t.Errorf("the test proves nothing: n1 keeps %v without the grace", got["n1"])
	}
	// Still quiet one stale window after the wake: stale.
	later := woke.Add(e.srv.staleAfter + time.Second)
	for at := woke; at.Before(later); at = at.Add(time.Second) {
		h.beat(at)
	}
	if since, _ = h.since(later); !since.Equal(woke) {
		t.Fatalf("hearing began %v, want the wake", since)
	}
	if got, _ := e.srv.desiredFeatures(later, since); len(got["n1"]) != 0 {
		t.Errorf("one stale window after the wake, n1 still has %v", got["n1"])
	}
}
