package agent

// Reading verified chunks from the peers of the member's own fabric: which
// peer to ask, how long to wait for one, and what a member does about a peer
// that fails it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/api"
)

// peerParallel is how many chunks a member reads from peers at once, each
// from a different peer where it can: one slow or dying peer then holds up
// a third of the flow, not all of it.
const peerParallel = 3

// peerStall is how long a peer's body may send nothing before the read is
// given up and the chunk asked of another holder: a relay that hangs
// without closing (a stopped process, a wedged disk) must cost its readers
// no more than the relay that dies, within the 2 s issue 18 allows.
const peerStall = time.Second

// peerDownFor is how long a peer that failed a read is left alone by this
// member, whatever the plans say: a plan can list it again before the
// coordinator has heard it is unreachable, and a hung peer costs a
// peerStall every time it is tried. A peer that refused a chunk its plan
// entry says it holds (404, 416, a 503 that is not "busy") failed a read
// as much as one that did not answer: taken as "not there yet", a member
// claiming the whole file and refusing every request wedged its fabric
// (issue 24: 7,264 requests to it in 60 s, no origin byte, nobody told).
const peerDownFor = 5 * time.Second

// peerFloorRate is the slowest a peer read may be: a chunk's body must
// arrive within peerStall and its size at this rate (17 s for 16 MiB), or the
// peer is left alone and reported like one that stopped sending; and a
// lease holder whose peers together send it less than this for a report
// interval (at least peerStall) reads the origin instead. A byte every
// 900 ms escapes peerStall, and a member trickling the chunks it claims
// would otherwise hold its readers, the lease holder among them, for as
// long as it likes. A megabyte a second is far below any fabric link; a
// peer that slow is broken or hostile either way.
const peerFloorRate = 1 << 20

// peerBusyFor is how long a member leaves alone a peer that answered busy
// (503 with Retry-After: its upload slots are full), without reporting it:
// an honest holder's slots free within a chunk's transfer. A peer that has
// answered this member nothing but refusals for peerDownFor is reported
// and left alone like any failed one, whatever it says.
const peerBusyFor = time.Second

// peerHolds says whether a peer of plan that this node has not found bad
// offers chunk i verified.
func (s *swarm) peerHolds(plan api.SwarmPlan, i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.sums) || s.sums[i] == "" {
		return false
	}
	for _, p := range plan.Peers {
		if s.usable(p) && p.Holds(i) {
			return true
		}
	}
	return false
}

// usable says whether p may be asked for chunks: not found bad, not left
// alone after a failed read (shun). Called under s.mu.
func (s *swarm) usable(p api.SwarmPeer) bool {
	if s.bad[p.Node] || p.Addr == "" {
		return false
	}
	return !time.Now().Before(s.down[p.Addr])
}

// shun leaves peer p alone after a failed read: for peerBusyFor when it
// said it was busy, else (and once it has refused this member anything
// for peerDownFor) for peerDownFor, naming it in the next report as
// unreachable. why labels the failure in the agent's metrics.
func (s *swarm) shun(p api.SwarmPeer, why string) {
	if s.onPeerFailure != nil {
		s.onPeerFailure(why)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	since, ok := s.refusing[p.Addr]
	if !ok {
		s.refusing[p.Addr], since = now, now
	}
	if why == "busy" && now.Sub(since) < peerDownFor {
		s.down[p.Addr] = now.Add(peerBusyFor)
		return
	}
	s.down[p.Addr] = now.Add(peerDownFor)
	s.unreach = append(s.unreach, p.Node)
}

// served notes that peer p answered a read: it is no longer refusing.
func (s *swarm) served(p api.SwarmPeer) {
	s.mu.Lock()
	delete(s.refusing, p.Addr)
	s.mu.Unlock()
}

// peersHold says whether a chunk missing here can be read from a peer.
func (s *swarm) peersHold(plan api.SwarmPlan) bool {
	for i := 0; i < s.n; i++ {
		if !s.has(i) && s.peerHolds(plan, i) {
			return true
		}
	}
	return false
}

// fromPeersRun reads missing chunks whose digests are known from the peers
// that hold them, several at once from different peers, until until or
// until nothing more can be read on this plan; idle says nothing could. The
// lease holder's run also ends when its peers stall (peersStalled): the
// peers it was reading from are left alone, and the next turn of the loop
// reads the origin.
func (s *swarm) fromPeersRun(ctx context.Context, plan api.SwarmPlan, until time.Time) (idle bool, err error) {
	type job struct {
		i    int
		peer api.SwarmPeer
	}
	taken := map[int]bool{}
	var mu sync.Mutex
	next := func() (job, bool) {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < s.n; i++ {
			if taken[i] || s.has(i) {
				continue
			}
			s.mu.Lock()
			known := s.sums[i] != ""
			s.mu.Unlock()
			if !known {
				continue
			}
			// Consecutive chunks go to consecutive holders, whichever
			// worker takes them: the workers, which take consecutive
			// chunks, spread over the holders, and which holder a chunk
			// is asked of first does not depend on the order the
			// scheduler ran the workers in. (By worker and chunk, three
			// workers starting on chunks 0-2 all asked one holder of two.)
			var holders []api.SwarmPeer
			s.mu.Lock()
			for _, p := range plan.Peers {
				if s.usable(p) && p.Holds(i) {
					holders = append(holders, p)
				}
			}
			s.mu.Unlock()
			if len(holders) == 0 {
				continue
			}
			taken[i] = true
			return job{i, holders[i%len(holders)]}, true
		}
		return job{}, false
	}
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if plan.Lease {
		every := time.Duration(max(plan.ReportEvery, 100)) * time.Millisecond
		watching := make(chan struct{})
		defer close(watching)
		go func() {
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-watching:
					return
				case <-t.C:
				}
				if s.peersStalled(every) {
					stop(errPeersStalled)
					return
				}
			}
		}()
	} else {
		s.mu.Lock()
		s.watchAt = time.Time{}
		s.mu.Unlock()
	}
	var wg sync.WaitGroup
	var moved atomic.Int64
	for range peerParallel {
		wg.Go(func() {
			for time.Now().Before(until) && rctx.Err() == nil {
				j, ok := next()
				if !ok {
					return
				}
				err := s.fromPeer(rctx, j.peer, j.i)
				var refused *refusedError
				switch {
				case err == nil:
					moved.Add(1)
					s.served(j.peer)
					continue
				case ctx.Err() != nil:
					return
				case errors.Is(context.Cause(rctx), errPeersStalled), errors.Is(err, errSlowPeer):
					s.log.WithError(err).WithField("peer", j.peer.Node).Info("swarm: peer sends slower than the floor; leaving it alone and reporting it")
					s.shun(j.peer, "slow")
				case errors.Is(err, errBadChunk):
					s.log.WithField("peer", j.peer.Node).Warn("swarm: a peer sent a chunk that does not match its digest; dropping it")
					if s.onPeerFailure != nil {
						s.onPeerFailure("bad")
					}
					s.mu.Lock()
					s.bad[j.peer.Node] = true
					s.mu.Unlock()
				case errors.Is(err, errBusy):
					s.log.WithField("peer", j.peer.Node).Debug("swarm: peer busy; moving to another holder")
					s.shun(j.peer, "busy")
				case errors.As(err, &refused):
					s.log.WithError(err).WithField("peer", j.peer.Node).Info("swarm: peer refused a chunk it claims; leaving it alone and reporting it")
					s.shun(j.peer, "refused")
				default:
					s.log.WithError(err).WithField("peer", j.peer.Node).Info("swarm: peer unreachable; moving to another holder")
					s.shun(j.peer, "unreachable")
				}
				// Another holder may have it.
				mu.Lock()
				delete(taken, j.i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if errors.Is(context.Cause(rctx), errPeersStalled) {
		s.log.WithField("floor_bytes_per_s", peerFloorRate).Warn("swarm: this lease holder's peers sent less than the floor for a report interval; reading the origin")
		return false, ctx.Err()
	}
	if moved.Load() == 0 {
		s.probeHolder(ctx, plan)
		// Nothing to read on this plan. The next report waits at the
		// coordinator for news; but a plan that came at once after asking
		// to wait (a coordinator that does not hold answers, or news that
		// was not for this member) must not make a busy loop of it: then
		// it is the old pace, a few plans per report interval.
		every := time.Until(until)
		pace := max(every/idlePolls, min(every, 50*time.Millisecond))
		if !s.waited || s.answeredIn < pace {
			if err := sleep(ctx, pace-min(s.answeredIn, pace)); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, ctx.Err()
}

// probeHolder checks, once a report interval, that the lease holder still
// accepts connections on its chunk server, and reports it unreachable when
// it does not. A member caught up with the holder reads nothing from it, so
// without this nobody would see a killed seed refuse connections, and the
// lease would wait out the whole silence timeout (5 s) instead of the
// coordinator's 500 ms for a holder that is both silent and unreachable.
// A connection only: no request, no credential.
func (s *swarm) probeHolder(ctx context.Context, plan api.SwarmPlan) {
	every := time.Duration(max(plan.ReportEvery, 100)) * time.Millisecond
	if plan.Holder == "" || plan.Holder == s.node || time.Since(s.probed) < every {
		return
	}
	addr := ""
	for _, p := range plan.Peers {
		if p.Node == plan.Holder {
			addr = p.Addr
		}
	}
	if addr == "" {
		return
	}
	s.probed = time.Now()
	dial := (&net.Dialer{Timeout: every}).DialContext
	if t, ok := s.peer.Transport.(*http.Transport); ok && t.DialContext != nil {
		dial = t.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	c, err := dial(dctx, "tcp", addr)
	if err == nil {
		c.Close()
		return
	}
	if ctx.Err() != nil {
		return
	}
	s.log.WithError(err).WithField("holder", plan.Holder).Info("swarm: the origin lease holder does not accept connections; reporting it")
	s.shun(api.SwarmPeer{Node: plan.Holder, Addr: addr}, "unreachable")
}

// peersStalled says whether the lease holder's peers have sent it less
// than peerFloorRate over the last report interval (at least peerStall)
// it spent reading them; it moves the window on when they did not. Only
// the holder's run (fromPeersRun) asks, and the window is kept across its
// runs: a run lasts one report interval, the window may be longer.
func (s *swarm) peersStalled(every time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, in := time.Now(), s.peerBytesIn.Load()
	if s.watchAt.IsZero() {
		s.watchAt, s.watchFrom = now, in
		return false
	}
	el := now.Sub(s.watchAt)
	if el < max(every, peerStall) {
		return false
	}
	if float64(in-s.watchFrom) < peerFloorRate*el.Seconds() {
		s.watchAt = time.Time{}
		return true
	}
	s.watchAt, s.watchFrom = now, in
	return false
}

var (
	errBadChunk     = errors.New("chunk does not match its digest")
	errBusy         = errors.New("peer busy")
	errSlowPeer     = errors.New("peer sends slower than the floor")
	errPeersStalled = errors.New("the lease holder's peers sent less than the floor for a report interval")
)

// refusedError is a peer's refusal of a chunk the plan says it holds.
type refusedError struct {
	addr   string
	status string
	chunk  int
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("peer %s answered %s for chunk %d, which the plan says it holds", e.addr, e.status, e.chunk)
}

// fromPeer reads chunk i from peer, verifies it against the digest the
// coordinator gave, never one from the peer, and only then writes it.
func (s *swarm) fromPeer(ctx context.Context, p api.SwarmPeer, i int) error {
	from, to := s.bounds(i)
	// The client's timeouts end at the response's header; a body that stops
	// coming is ended here, peerStall after its last byte, and one that
	// comes slower than peerFloorRate at its limit.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := peerGet(ctx, s.peer, s.codec, s.node, s.fabric, p.Addr, s.sum, from, to, false)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	stall := time.AfterFunc(peerStall, func() {
		cancel(fmt.Errorf("peer %s sent nothing for %v", p.Addr, peerStall))
	})
	defer stall.Stop()
	limit := peerStall + time.Duration(float64(to-from+1)/peerFloorRate*float64(time.Second))
	slow := time.AfterFunc(limit, func() {
		cancel(fmt.Errorf("peer %s: chunk %d not whole within %v: %w", p.Addr, i, limit.Round(time.Millisecond), errSlowPeer))
	})
	defer slow.Stop()
	switch {
	case resp.StatusCode == http.StatusPartialContent:
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		return errBusy
	default:
		return &refusedError{addr: p.Addr, status: resp.Status, chunk: i}
	}
	buf := make([]byte, to-from+1)
	// Every byte that arrives restarts the stall timer, and counts for the
	// lease holder's watch on its peers (peersStalled).
	n, err := io.ReadFull(countReader{resp.Body, func(m int) {
		stall.Reset(peerStall)
		s.peerBytesIn.Add(int64(m))
	}}, buf)
	if err != nil {
		s.discard(int64(n))
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		return fmt.Errorf("peer %s: %w", p.Addr, err)
	}
	s.mu.Lock()
	want := s.sums[i]
	s.mu.Unlock()
	if hexSum(buf) != want {
		s.discard(int64(n))
		return errBadChunk
	}
	if _, err := s.fh.WriteAt(buf, from); err != nil {
		s.discard(int64(n))
		return err
	}
	// Counted once it landed: what a peer sent that was thrown away is
	// not a copy this member has (discard).
	s.fromPeers.Add(int64(n))
	s.onBytes("peer", int64(n))
	s.landed(i)
	s.saveSidecar()
	s.progress()
	return nil
}

// peerClient reads chunks from peers: a peer that does not accept a
// connection within a second, or answer within two, is treated as gone, so
// that a member moves to another holder within the 2 s issue 18 allows.
func peerClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: time.Second}).DialContext,
		ResponseHeaderTimeout: 2 * time.Second,
		MaxIdleConnsPerHost:   peerParallel,
		DisableCompression:    true,
	}}
}
