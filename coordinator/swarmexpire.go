package coordinator

import (
	"time"
)

// The registry's bounds over time (issue 24). Expiry runs on a timer, not
// in every report: a report walked every swarm under the registry's lock,
// so one node's 4,096 swarms made every other node's report slow. And a
// membership counts against its node's quota (swarmsPerNode) until it
// expires, finished or not: memberships that went complete, then gone,
// stopped counting, and one node made 4,096 swarms in 12 s.

// swarmExpireEvery is how often the registry is swept.
const swarmExpireEvery = time.Second

// startExpiry starts the sweeps, once: at the first swarm report, since a
// registry that never had a swarm has nothing to sweep.
func (sw *swarms) startExpiry(s *Server) {
	sw.sweeping.Do(func() {
		sw.expired = make(chan struct{})
		go sw.expireLoop(s)
	})
}

// stopped waits for the sweeps to end, when they ever started; the server
// has stopped them (s.stop).
func (sw *swarms) stopped() {
	sw.sweeping.Do(func() {})
	if sw.expired != nil {
		<-sw.expired
	}
}

// expireLoop sweeps the registry every swarmExpireEvery until the server
// stops.
func (sw *swarms) expireLoop(s *Server) {
	defer close(sw.expired)
	t := time.NewTicker(swarmExpireEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			sw.expire(s, s.now())
		}
	}
}

// expire drops idle swarms, members silent past swarmIdle (their lease
// first), and members that left complete once kept past their retention or
// when their node went stale.
func (sw *swarms) expire(s *Server, now time.Time) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	// The view's lock inside the registry's, the order a report takes them
	// in (swarmstatus.go).
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	for _, g := range sw.m {
		if now.Sub(g.last) > swarmIdle {
			sw.remove(g)
			continue
		}
		for _, n := range append([]string(nil), g.names...) {
			m := g.members[n]
			if m == nil {
				continue
			}
			silent := now.Sub(m.last)
			switch {
			case m.gone && silent > completeRetention:
			case m.gone && s.staleLocked(n, now):
			case !m.gone && silent > swarmIdle:
			default:
				continue
			}
			if g.holder == n {
				sw.passLease(s, g, now, "member expired")
			}
			sw.drop(g, n)
		}
	}
}

// staleLocked says whether node has missed its reports (the coordinator's
// staleness rule) or is unknown. The caller holds s.view.mu.
func (s *Server) staleLocked(node string, now time.Time) bool {
	vn := s.view.nodes[node]
	return vn == nil || now.Sub(vn.Received) > s.staleAfter
}
