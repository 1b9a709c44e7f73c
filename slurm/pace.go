package slurm

import "time"

// A Pacer spaces a writer's calls to slurmctld by what they cost others, so
// that a reconcile of thousands of update RPCs does not crowd out what
// users feel: their commands' latency and the scheduler's cycle.
//
// Slurm does not pace the writer itself: root and SlurmUser, who alone may
// update nodes, are exempt from slurmctld's RPC rate limit
// (src/slurmctld/rate_limit.c, rate_limit_exceeded: "Exempt SlurmUser /
// root", 24.11 and 26.05; 22.05 has no rate limit at all). And every
// update_node RPC takes slurmctld's job, partition and node write locks
// (_slurm_rpc_update_node, src/slurmctld/proc_req.c), which every user's
// squeue (job read), sbatch (job write) and the scheduler wait for, and asks
// for a node state save and a scheduler pass after it.
//
// Three rules:
//   - what users feel: before the first call and every ProbeEvery calls, the
//     writer times a read a user's squeue makes too (a job lookup: the job
//     and partition read locks, the same round trip, the same CPUs), and
//     the pacer compares the median of the last three with the median of
//     those before the run (one read is noise on a busy host). Slower than
//     Target times that, the calls' share of slurmctld's time shrinks by a
//     third, down to MinShare; well within it, it grows back, up to all of
//     it. A quiet controller gets its reconcile done at full speed, a busy
//     one is left its users.
//   - the share: after a call that took d, the next waits d·(1−share)/share,
//     so the calls take at most that share of slurmctld's time in a row and
//     another client's RPC waits behind at most one of them;
//   - a brake: a call that took more than Busy times the usual (a moving
//     average of the run's calls) waited for someone (the scheduler, a
//     state save, a reconfigure holding the locks), so the pause grows,
//     doubling while the calls stay slow, up to MaxPause, and shrinks by
//     half with each usual one. Against the quickest call instead, one
//     lucky call made every later one "slow" and a pause of a second each
//     stretched a reconcile of 8,000 calls past its two minutes.
//
// The zero value uses the defaults. scripts/bench/scale.sh measures users'
// squeue and sbatch during a full reconcile of 10,000 nodes against their
// latency when idle, unpaced and paced.
type Pacer struct {
	// Share is the share of slurmctld's time the calls start with
	// (default DefaultShare).
	Share float64
	// Target is how much slower than before the run a user's read may
	// grow (default DefaultTarget).
	Target float64
	// ProbeEvery is how many calls go between two reads timed (default
	// DefaultProbeEvery).
	ProbeEvery int
	// Busy is how many times the quickest call a call may take before
	// slurmctld counts as busy (default DefaultBusy).
	Busy float64
	// MaxPause bounds one pause (default DefaultMaxPause).
	MaxPause time.Duration

	share   float64         // the share now
	before  []time.Duration // the reads before the run
	base    time.Duration   // their median
	recent  []time.Duration // the last reads during the run
	probed  int             // probes seen
	sinceAt int             // calls since the last probe
	usual   float64         // a moving average of the calls, in ns
	brake   time.Duration   // the brake's part of the pause

	// Calls, Took and Paused count the calls and the time spent in them
	// and between them; Braked the calls after which the brake grew;
	// Probes the reads timed, Slowed of them over Target; LowestShare the
	// least share the run came down to.
	Calls       int
	Took        time.Duration
	Paused      time.Duration
	Braked      int
	Probes      int
	Slowed      int
	LowestShare float64
}

// Pacer defaults.
const (
	// DefaultShare: all of it, to begin with: on a quiet controller the
	// probes keep it there (at 2–3 ms an update on 2 cores, 8,000 updates
	// took 23 s, users' squeue 1.44x and sbatch 1.10x their idle time:
	// scripts/bench/scale.sh).
	DefaultShare = 1
	// MinShare: half, so that a reconcile takes at most about twice its
	// time at full speed. Users' reads also slow for reasons of their own
	// (other work on the host), and with a tenth, on a loaded 2-core
	// machine, a reconcile of 8,000 calls ran past five minutes while
	// users' squeue stayed twice as slow: a long reconcile is also more of
	// slurmctld's state saves (behaviour §11).
	MinShare = 0.5
	// DefaultTarget: users' reads at most a third slower than without the
	// writer, for issue 26's goal of 1.5 times a user's whole command
	// (process start and output included, which the writer does not slow).
	DefaultTarget = 1.3
	// DefaultProbeEvery: a read per 50 calls is 2% more RPCs.
	DefaultProbeEvery = 50
	// baseProbes: the base is the median of this many reads before the
	// first call, and a read during the run counts as the median of the
	// last recentProbes: one read is noise on a busy host.
	baseProbes   = 5
	recentProbes = 3
	// usualWeight is the weight of one call in the moving average the
	// brake compares with; usualAfter calls make it meaningful.
	usualWeight = 0.05
	usualAfter  = 10
	// DefaultBusy: an update normally varies by less than 2× within a run;
	// 3× is another client, the scheduler or a save holding the lock.
	DefaultBusy = 3
	// DefaultMaxPause: a reconcile must still end.
	DefaultMaxPause = time.Second
)

func (p *Pacer) defaults() (target float64, every int, busy float64, maxPause time.Duration) {
	target, every, busy, maxPause = p.Target, p.ProbeEvery, p.Busy, p.MaxPause
	if target <= 1 {
		target = DefaultTarget
	}
	if every <= 0 {
		every = DefaultProbeEvery
	}
	if busy <= 1 {
		busy = DefaultBusy
	}
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	if p.share == 0 {
		p.share = p.Share
		if p.share <= 0 || p.share > 1 {
			p.share = DefaultShare
		}
		p.LowestShare = p.share
	}
	return
}

// WantProbe says whether to time a user's read before the next call.
func (p *Pacer) WantProbe() bool {
	_, every, _, _ := p.defaults()
	return p.probed < baseProbes || p.sinceAt >= every
}

// Probed records how long a user's read took.
func (p *Pacer) Probed(took time.Duration) {
	target, _, _, _ := p.defaults()
	p.sinceAt = 0
	p.probed++
	if p.probed <= baseProbes {
		p.before = append(p.before, took)
		p.base = median(p.before)
		return
	}
	p.Probes++
	p.recent = append(p.recent, took)
	if len(p.recent) > recentProbes {
		p.recent = p.recent[1:]
	}
	if p.base <= 0 {
		return
	}
	switch ratio := float64(median(p.recent)) / float64(p.base); {
	case ratio > target:
		p.Slowed++
		p.share = max(p.share*2/3, MinShare)
	case ratio < 1+(target-1)/2:
		p.share = min(p.share+0.1, 1)
	}
	p.LowestShare = min(p.LowestShare, p.share)
}

// median of ds (the lower one of an even count, so that of two reads the
// quicker counts).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[(len(s)-1)/2]
}

// Pause records a call that took took and returns how long to wait before
// the next.
func (p *Pacer) Pause(took time.Duration) time.Duration {
	_, _, busy, maxPause := p.defaults()
	p.Calls++
	p.sinceAt++
	p.Took += took
	if p.Calls > usualAfter && float64(took) > busy*p.usual {
		p.brake = min(max(2*p.brake, took), maxPause)
		p.Braked++
	} else {
		p.brake /= 2
	}
	if p.usual == 0 {
		p.usual = float64(took)
	} else {
		p.usual += usualWeight * (float64(took) - p.usual)
	}
	pause := min(time.Duration(float64(took)*(1-p.share)/p.share)+p.brake, maxPause)
	p.Paused += pause
	return pause
}
