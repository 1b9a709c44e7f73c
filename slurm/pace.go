package slurm

import "time"

// A Pacer spaces a writer's calls to slurmctld by what they cost it, so
// that a reconcile of thousands of update RPCs does not crowd out what
// users feel: their commands' latency and the scheduler's cycle.
//
// Slurm does not pace the writer itself: root and SlurmUser, who alone may
// update nodes, are exempt from slurmctld's RPC rate limit
// (src/slurmctld/rate_limit.c, rate_limit_exceeded: "Exempt SlurmUser /
// root", 24.11 and 26.05; 22.05 has no rate limit at all). And every
// update_node RPC takes
// slurmctld's node write lock, which a user's sbatch (node read) and the
// scheduler (node read, job write) wait for.
//
// Two rules, both read from the calls' own round trips, which are
// slurmctld's work for them plus whatever they waited for:
//   - a share: after a call that took d, the next waits d·(1−Share)/Share,
//     so the calls take at most Share of slurmctld's time in a row and
//     another client's RPC waits behind at most one of them;
//   - a brake: a call that took more than Busy times the quickest of the
//     run waited for someone (a user's command, the scheduler, a
//     reconfigure holding the locks), so the pause grows, doubling while
//     the calls stay slow, up to MaxPause, and shrinks by half with each
//     quick one.
//
// The zero value uses the defaults. Pacing is the reconciler's own, not a
// fixed rate: a quick slurmctld gets its reconcile done quickly, a busy one
// is left alone. scripts/bench/scale.sh measures users' latency during a
// full reconcile of 10,000 nodes against their latency when idle.
type Pacer struct {
	// Share is the largest part of slurmctld's time, calls back to back,
	// the calls may take (default DefaultShare).
	Share float64
	// Busy is how many times the quickest call a call may take before
	// slurmctld counts as busy (default DefaultBusy).
	Busy float64
	// MaxPause bounds one pause (default DefaultMaxPause).
	MaxPause time.Duration

	best  time.Duration // the quickest call of the run
	brake time.Duration // the brake's part of the pause

	// Calls, Took and Paused count the calls and the time spent in them
	// and between them.
	Calls  int
	Took   time.Duration
	Paused time.Duration
	// Braked counts the calls after which the brake grew.
	Braked int
}

// Pacer defaults.
const (
	// DefaultShare: half. At 1–2 ms an update on 2 cores, 10,000 updates
	// take 20–40 s, and a user's command never waits behind more than one.
	DefaultShare = 0.5
	// DefaultBusy: an update normally varies by less than 2× within a run;
	// 3× is another client, the scheduler or a save holding the lock.
	DefaultBusy = 3
	// DefaultMaxPause: a reconcile must still end; a second between calls
	// is slurmctld's main scheduler's own default interval (sched_interval
	// is 60 s, but a busy controller answers in well under a second).
	DefaultMaxPause = time.Second
)

// Pause records a call that took took and returns how long to wait before
// the next.
func (p *Pacer) Pause(took time.Duration) time.Duration {
	share, busy, maxPause := p.Share, p.Busy, p.MaxPause
	if share <= 0 || share > 1 {
		share = DefaultShare
	}
	if busy <= 1 {
		busy = DefaultBusy
	}
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	p.Calls++
	p.Took += took
	if took > 0 && (p.best == 0 || took < p.best) {
		p.best = took
	}
	if p.best > 0 && float64(took) > busy*float64(p.best) {
		p.brake = min(max(2*p.brake, took), maxPause)
		p.Braked++
	} else {
		p.brake /= 2
	}
	pause := min(time.Duration(float64(took)*(1-share)/share)+p.brake, maxPause)
	p.Paused += pause
	return pause
}
