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
// peerStall every time it is tried.
const peerDownFor = 5 * time.Second

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

// usable says whether p may be asked for chunks: not found bad, not failed
// within peerDownFor. Called under s.mu.
func (s *swarm) usable(p api.SwarmPeer) bool {
	if s.bad[p.Node] || p.Addr == "" {
		return false
	}
	if t, ok := s.down[p.Addr]; ok && time.Since(t) < peerDownFor {
		return false
	}
	return true
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
// until nothing more can be read on this plan; idle says nothing could.
func (s *swarm) fromPeersRun(ctx context.Context, plan api.SwarmPlan, until time.Time) (idle bool, err error) {
	type job struct {
		i    int
		peer api.SwarmPeer
	}
	taken := map[int]bool{}
	var mu sync.Mutex
	next := func(worker int) (job, bool) {
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
			// Spread the workers over the holders of this chunk.
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
			return job{i, holders[(worker+i)%len(holders)]}, true
		}
		return job{}, false
	}
	var wg sync.WaitGroup
	var moved atomic.Int64
	for w := 0; w < peerParallel; w++ {
		wg.Go(func() {
			for time.Now().Before(until) && ctx.Err() == nil {
				j, ok := next(w)
				if !ok {
					return
				}
				switch err := s.fromPeer(ctx, j.peer, j.i); {
				case err == nil:
					moved.Add(1)
				case errors.Is(err, errBadChunk):
					s.log.WithField("peer", j.peer.Node).Warn("swarm: a peer sent a chunk that does not match its digest; dropping it")
					s.mu.Lock()
					s.bad[j.peer.Node] = true
					s.mu.Unlock()
					mu.Lock()
					delete(taken, j.i)
					mu.Unlock()
				case errors.Is(err, errNotThere):
					// Not verified there yet (its Have in the plan is older):
					// another holder, or the next plan.
				default:
					s.log.WithError(err).WithField("peer", j.peer.Node).Info("swarm: peer unreachable; moving to another holder")
					s.mu.Lock()
					s.unreach = append(s.unreach, j.peer.Node)
					s.down[j.peer.Addr] = time.Now()
					s.mu.Unlock()
					mu.Lock()
					delete(taken, j.i)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
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
	s.mu.Lock()
	s.unreach = append(s.unreach, plan.Holder)
	s.down[addr] = time.Now()
	s.mu.Unlock()
}

var (
	errBadChunk = errors.New("chunk does not match its digest")
	errNotThere = errors.New("chunk not verified at the peer")
)

// fromPeer reads chunk i from peer, verifies it against the digest the
// coordinator gave, never one from the peer, and only then writes it.
func (s *swarm) fromPeer(ctx context.Context, p api.SwarmPeer, i int) error {
	from, to := s.bounds(i)
	// The client's timeouts end at the response's header; a body that stops
	// coming is ended here, peerStall after its last byte.
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
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusRequestedRangeNotSatisfiable, http.StatusNotFound, http.StatusServiceUnavailable:
		return errNotThere
	default:
		return fmt.Errorf("peer %s answered %s", p.Addr, resp.Status)
	}
	buf := make([]byte, to-from+1)
	// Every byte that arrives restarts the stall timer.
	n, err := io.ReadFull(countReader{resp.Body, func(int) { stall.Reset(peerStall) }}, buf)
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
