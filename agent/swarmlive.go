package agent

// Cut-through: a member streams the chunk the lease holder is reading from
// the origin, and lands it only once its digest comes from the coordinator.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/fetch"
)

// liveFloorRate is the slowest the rest of a live chunk may come once its
// digest is out, as fetch's fetch_min_speed default is for an origin
// connection: a holder that trickles (a byte every 900 ms escapes
// peerStall) would otherwise hold settleLive, and the member's reports,
// without limit.
const liveFloorRate = fetch.DefaultMinSpeed

// liveFetch is one stream of the chunk the lease holder is reading from
// the origin (peerServer.serveLive): its bytes in memory with their running
// sha256, written only once the sum matches the digest the coordinator
// publishes for the chunk.
type liveFetch struct {
	i      int
	holder string
	cancel context.CancelFunc
	done   chan struct{}
	got    atomic.Int64 // bytes received so far
	last   atomic.Int64 // when the last byte came, unix ns
	// Set before done is closed:
	buf []byte
	sum string // of buf, when the whole chunk came
	err error
}

// liveKey names one live read: a holder and a chunk.
type liveKey struct {
	holder string
	i      int
}

// startLive starts streaming, from the lease holder, the first chunk this
// member lacks whose digest is not known yet: the one the holder is
// reading. One stream at a time, so one chunk buffer; a holder reading
// another chunk answers 416 and the chunk is read the usual way.
func (s *swarm) startLive(ctx context.Context, plan api.SwarmPlan) {
	if plan.Holder == "" || plan.Holder == s.node {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live != nil {
		return
	}
	if s.liveRefused.holder != plan.Holder {
		// Another holder since the refusal: the lease may come back to
		// the one that refused, then reading another chunk.
		s.liveRefused = liveKey{}
	}
	var holder api.SwarmPeer
	for _, p := range plan.Peers {
		if p.Node == plan.Holder && s.usable(p) {
			holder = p
		}
	}
	if holder.Node == "" {
		return
	}
	i := -1
	for c := 0; c < s.n; c++ {
		if s.sums[c] == "" && !s.has(c) {
			i = c
			break
		}
	}
	if i < 0 || s.liveRefused == (liveKey{holder.Node, i}) {
		return
	}
	from, to := s.bounds(i)
	lctx, cancel := context.WithCancel(ctx)
	l := &liveFetch{i: i, holder: holder.Node, cancel: cancel, done: make(chan struct{})}
	l.last.Store(time.Now().UnixNano())
	s.live = l
	go func() {
		defer close(l.done)
		resp, err := peerGet(lctx, s.peer, s.codec, s.node, s.fabric, holder.Addr, s.sum, from, to, true)
		if err != nil {
			l.err = err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusPartialContent {
			l.err = fmt.Errorf("peer %s answered %s to a live read", holder.Addr, resp.Status)
			if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable || resp.StatusCode == http.StatusServiceUnavailable {
				s.mu.Lock()
				s.liveRefused = liveKey{holder.Node, i}
				s.mu.Unlock()
			}
			return
		}
		buf := make([]byte, to-from+1)
		h := sha256.New()
		n := 0
		for n < len(buf) {
			m, err := resp.Body.Read(buf[n:])
			if m > 0 {
				h.Write(buf[n : n+m])
				n += m
				l.got.Store(int64(n))
				l.last.Store(time.Now().UnixNano())
			}
			if err != nil && n < len(buf) {
				l.err = fmt.Errorf("live read of chunk %d from peer %s: %w", i, holder.Addr, err)
				return
			}
		}
		l.buf, l.sum = buf, hex.EncodeToString(h.Sum(nil))
	}()
}

// settleLive ends the live stream once it can no longer be used, and lands
// its chunk when the chunk's digest is known: it waits for the rest of the
// stream (the holder had the whole chunk when it published the digest) as
// long as bytes keep coming, then writes the chunk if its sum matches, as a
// verified chunk from a peer. A mismatch drops the holder as a peer that
// sent a bad chunk; a broken stream costs only the read the usual way.
func (s *swarm) settleLive(ctx context.Context, plan api.SwarmPlan) error {
	s.mu.Lock()
	l := s.live
	var want string
	if l != nil {
		want = s.sums[l.i]
	}
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	if s.has(l.i) {
		s.dropLive()
		return nil
	}
	select {
	case <-l.done:
	default:
		if plan.Holder != l.holder {
			// The holder this streams from lost the lease (died, or its
			// origin read stopped): what it would still send is not worth
			// waiting for.
			s.dropLive()
			return nil
		}
		if want == "" {
			return nil // streaming, the digest not out yet
		}
		// The holder had the whole chunk when it published the digest:
		// the rest is on its way at fabric speed, unless the holder died
		// or trickles it; then the chunk is read the usual way.
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		waited := time.Now().UnixNano()
		from, to := s.bounds(l.i)
		rest := max(to-from+1-l.got.Load(), 0)
		deadline := time.Now().Add(peerStall + time.Duration(rest)*time.Second/time.Duration(liveFloorRate))
	wait:
		for {
			select {
			case <-l.done:
				break wait
			case <-ctx.Done():
				s.dropLive()
				return ctx.Err()
			case <-t.C:
				if time.Since(time.Unix(0, max(l.last.Load(), waited))) > peerStall {
					s.log.WithField("peer", l.holder).Info("swarm: the holder's live chunk stopped coming; reading it the usual way")
					s.dropLive()
					return nil
				}
				if time.Now().After(deadline) {
					s.log.WithField("peer", l.holder).Infof("swarm: the rest of the holder's live chunk comes slower than %d bytes/s; reading it the usual way", liveFloorRate)
					s.dropLive()
					return nil
				}
			}
		}
	}
	if l.err == nil && want == "" {
		if plan.Holder != l.holder {
			// Whole, but its holder lost the lease before the digest came
			// out (died, or this member took the lease and reads the chunk
			// from the origin itself): the digest may never come, and kept,
			// the buffer would pin a second chunk of memory for the rest
			// of the file.
			s.dropLive()
			return nil
		}
		// Whole, its digest not here yet: kept until it is (the holder
		// publishes it within a report of its last byte).
		return nil
	}
	// The stream has ended (l.done is closed): dropLive only forgets it.
	switch {
	case l.err != nil:
		s.log.WithError(l.err).Debug("swarm: live read of the holder's chunk ended; reading it the usual way")
		s.dropLive()
		return nil
	case l.sum != want:
		s.log.WithField("peer", l.holder).Warn("swarm: the lease holder's live chunk does not match its digest; dropping it as a peer")
		s.mu.Lock()
		s.bad[l.holder] = true
		s.mu.Unlock()
		s.dropLive()
		return nil
	}
	s.mu.Lock()
	s.live = nil
	s.mu.Unlock()
	l.cancel()
	from, _ := s.bounds(l.i)
	if _, err := s.fh.WriteAt(l.buf, from); err != nil {
		s.discard(l.got.Load())
		return err
	}
	s.fromPeers.Add(int64(len(l.buf)))
	s.onBytes("peer", int64(len(l.buf)))
	s.landed(l.i)
	s.saveSidecar()
	s.progress()
	return nil
}

// dropLive ends the live stream, if any, and forgets its bytes.
func (s *swarm) dropLive() {
	s.mu.Lock()
	l := s.live
	s.live = nil
	s.mu.Unlock()
	if l != nil {
		l.cancel()
		<-l.done
		s.discard(l.got.Load())
	}
}

// discard counts n bytes from peers that were thrown away: the agent's
// llmgw_agent_swarm_received_bytes_total{from="peer_discarded"}, apart from
// the bytes that landed.
func (s *swarm) discard(n int64) {
	if n > 0 {
		s.discarded.Add(n)
		s.onBytes("peer_discarded", n)
	}
}
