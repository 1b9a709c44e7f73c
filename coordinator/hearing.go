package coordinator

import (
	"sync"
	"time"
)

// hearing is when the coordinator last began to hear reports: its first
// look, or the end of a pause in which it did not run at all (stopped by
// SIGSTOP or a debugger, its VM paused or migrated, the host swapping hard,
// its clock stepped forward). It heard no report during a pause; the ones
// the agents sent meanwhile wait in the kernel and are read only after it
// wakes, and until then every node looks stale though none missed a report
// the coordinator could have read. Seen on the dev cluster: a coordinator
// stopped for 8 s took llmgw.m1 off every node in its first run after
// waking, and put it back a second later, when the queued reports were
// read. So the feature reconciler counts staleness from the wake, as it
// does from its start (desiredFeatures).
//
// A pause shows as a gap longer than gap between looks; watchPauses looks
// every gap/4 and a run looks at its start (it can come before the first
// beat after a wake). gap is half the stale window: a node looks stale
// after a pause only when the pause is longer than the window less the
// report interval it may have been waiting out, two thirds of the window
// (StaleIntervals is 3), so each such pause shows, with room for a late
// beat. A gap that was not a pause (beats starved that long) costs only
// grace: a node that did go quiet then loses its features one stale window
// later.
type hearing struct {
	gap time.Duration

	mu    sync.Mutex
	began time.Time // when hearing last began; zero before the first look
	last  time.Time // the last beat, or the last run that saw a pause; zero while nothing beats
}

// beat notes that the coordinator runs at now; paused is how long it had
// not, when that was a pause, else 0.
func (h *hearing) beat(now time.Time) (paused time.Duration) {
	_, paused = h.look(now, true)
	return paused
}

// since is when hearing last began, as of now; paused is as for beat, for
// a pause no beat has seen yet. A run calls it: it does not beat, so that
// without beats (the reconciler's loop not started) there is no pause to
// see.
func (h *hearing) since(now time.Time) (began time.Time, paused time.Duration) {
	return h.look(now, false)
}

func (h *hearing) look(now time.Time, beat bool) (time.Time, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var paused time.Duration
	if !h.last.IsZero() {
		if d := now.Sub(h.last); d > h.gap {
			paused = d
			h.began = now
		}
	}
	if h.began.IsZero() {
		h.began = now
	}
	// A run that saw the pause moves the beat on, so that the next beat
	// does not report it again.
	if beat || paused > 0 {
		h.last = now
	}
	return h.began, paused
}
