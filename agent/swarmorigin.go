package agent

// The lease holder's side of a swarm fetch: the one origin read of its
// fabric, hashed chunk by chunk as it arrives, each chunk offered live
// (swarmlive.go) while it fills and published once whole.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// fromOriginRun reads the origin, holding the lease, from the first chunk
// not verified here through the run of missing chunks after it, hashing
// each chunk as it arrives. It returns at until (to report, keeping the
// lease and publishing the digests) or at the end of the run. A chunk a peer
// holds ends the run: it is read from the peer, not the origin.
func (s *swarm) fromOriginRun(ctx context.Context, plan api.SwarmPlan, until time.Time) error {
	first := s.missing()
	last := first
	for last+1 < s.n && !s.has(last+1) && !s.peerHolds(plan, last+1) {
		last++
	}
	from, _ := s.bounds(first)
	_, to := s.bounds(last)
	// The stream is never broken to report: the reports (keeping the lease,
	// publishing digests) go out beside it, and a lost lease ends it.
	ctx, cancel := context.WithCancel(ctx)
	every := until.Sub(time.Now())
	reported := make(chan struct{})
	defer func() {
		cancel()
		<-reported
	}()
	go func() {
		defer close(reported)
		t := time.NewTicker(max(every, 50*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-s.verifiedc:
				// Publish the new chunk's digest now, not at the next tick.
				t.Reset(max(every, 50*time.Millisecond))
			}
			p, err := s.coord.Swarm(ctx, s.report(false, false))
			if err != nil {
				continue
			}
			s.takePlan(p)
			if !p.Lease {
				s.log.Warn("swarm: the origin lease passed to another node; stopping the origin read")
				cancel()
				return
			}
		}
	}()
	resp, v, err := s.originGet(ctx, from, to)
	if err != nil || resp == nil {
		return err
	}
	defer resp.Body.Close()
	if v == "" {
		if nv := resp.Header.Get("ETag"); nv != "" && !strings.HasPrefix(nv, "W/") {
			v = nv
		} else {
			v = resp.Header.Get("Last-Modified")
		}
		s.mu.Lock()
		if !s.staleValidators[v] {
			s.validator = v
		}
		s.mu.Unlock()
	}
	// Origin bytes are counted as they arrive, not per chunk: the
	// coordinator takes the lease from a holder whose count stops growing
	// for swarm_lease_timeout (5 s), and a 16 MiB chunk over a fabric's
	// share of a slow uplink takes about that long (fanout.sh: 80 Mbit/s
	// for three fabrics, 5 s a chunk). Counted per chunk, a reading seed
	// lost its lease mid-chunk and a second node of its fabric read the
	// origin too (1.24 copies per fabric).
	var inChunk int64 // origin bytes of the chunk being read
	count := func(n int) {
		inChunk += int64(n)
		s.fromOrigin.Add(int64(n))
		s.onBytes("origin", int64(n))
	}
	body := io.Reader(countReader{resp.Body, count})
	if rb, ok := resp.Body.(*revBody); ok {
		// A revision's body counts its origin bytes itself: a chunk that
		// spans a file this node holds already reads that part from disk.
		body = rb.counting(count)
	}
	for i := first; i <= last; i++ {
		cf, ct := s.bounds(i)
		buf := make([]byte, ct-cf+1)
		// The chunk is offered live as it fills (peerServer.serveLive): the
		// fabric has it when its last byte is here, not a chunk's transfer
		// after its digest.
		lc := newLiveChunk(i, cf, buf)
		s.h.setLive(lc)
		// Hashed as it arrives, so that the digest the fabric waits for
		// goes out as soon as the last byte is in.
		hs := sha256.New()
		got, err := 0, error(nil)
		inChunk = 0
		for got < len(buf) && err == nil {
			var m int
			m, err = body.Read(buf[got:])
			hs.Write(buf[got : got+m])
			got += m
			lc.grew(got)
		}
		if got < len(buf) {
			lc.fail()
			s.h.setLive(nil)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			// The bytes of a partial chunk are dropped; the next request
			// starts at this chunk. Reported as dropped: the coordinator
			// expects a holder's digest once its origin bytes, less those
			// dropped, make a whole chunk.
			s.originDiscarded.Add(inChunk)
			if ctx.Err() == nil {
				s.log.WithError(err).Warn("swarm: origin read broke off; resuming")
			}
			return nil
		}
		s.h.setLive(nil)
		sum := hex.EncodeToString(hs.Sum(nil))
		if _, err := s.fh.WriteAt(buf, cf); err != nil {
			return err
		}
		s.mu.Lock()
		s.mine[i] = sum
		s.ownRead[i] = true
		known := s.sums[i]
		if known == "" {
			s.sums[i] = sum
		}
		s.mu.Unlock()
		if known != "" && known != sum {
			// An earlier reader of the origin (or a member's word) saw
			// other bytes: the newest read is published, and the whole
			// file's check against the pin tells which was right.
			s.log.WithFields(logrus.Fields{"chunk": i, "known": known, "now": sum}).Warn("swarm: the origin served other bytes for a chunk than the digest the swarm knows")
		}
		// Verified and its digest recorded: the reporter publishes both
		// now. Signalled after landed, the digest the fabric waits for
		// (the members streaming this chunk live hold it until then) went
		// out only after the chunk was read back and hashed for the whole
		// file's sum.
		s.h.mark(i)
		select {
		case s.verifiedc <- struct{}{}:
		default:
		}
		s.landed(i)
		s.saveSidecar()
		s.progress()
	}
	return nil
}

// originGet asks the origin for bytes from..to, with If-Range when the
// swarm has a validator, and returns the answer with the validator it was
// asked with; a nil answer and error when the caller is to come back
// (after a pause: a failed request, a 5xx, a 429).
//
// A 200 to If-Range says the origin's validator for these bytes is not the
// swarm's: a new version, or a CDN whose edges give the same bytes
// different ETags (no attacker needed; nor to make the first holder's
// validator a made-up one). That used to fail the whole fetch, telling
// the admin that the origin changed. The validator only spares a resumed
// read bytes of another version, and every chunk is still checked against
// its digest and the file against its pin, so the validator is dropped
// (for this member, for good: the swarm's plan keeps offering it) and the
// range asked for again without it.
func (s *swarm) originGet(ctx context.Context, from, to int64) (*http.Response, string, error) {
	if s.rev != nil {
		// A revision's bytes are its files', each asked of its own origin
		// (swarmrevorigin.go).
		return s.rev.originGet(ctx, from, to)
	}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.source, nil)
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to))
		s.mu.Lock()
		v := s.validator
		if s.staleValidators[v] {
			v = ""
		}
		s.mu.Unlock()
		if v != "" {
			req.Header.Set("If-Range", v)
		}
		resp, err := s.origin.Do(req)
		if err != nil {
			s.log.WithError(err).Warn("swarm: origin request failed; retrying")
			return nil, "", sleep(ctx, time.Second)
		}
		switch {
		case resp.StatusCode == http.StatusPartialContent:
			return resp, v, nil
		case resp.StatusCode == http.StatusOK && v != "":
			resp.Body.Close()
			s.log.WithFields(logrus.Fields{"validator": v, "now": resp.Header.Get("ETag")}).
				Warn("swarm: the origin answered If-Range with the whole file (another version, or a CDN edge with another ETag); resuming without the validator: the chunks are checked against their digests and the file against its pin")
			s.mu.Lock()
			s.staleValidators[v] = true
			if s.validator == v {
				s.validator = ""
			}
			s.mu.Unlock()
			continue
		case resp.StatusCode == http.StatusOK && from == 0:
			// The whole file from its first byte: what was asked for,
			// and more, which is not read.
			return resp, v, nil
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, "", sleep(ctx, time.Second)
		}
		return nil, "", fmt.Errorf("origin %s answered %s to a range request; a swarm needs an origin that serves ranges", s.source, resp.Status)
	}
}

// countReader passes the size of every read to count.
type countReader struct {
	r     io.Reader
	count func(int)
}

func (r countReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.count(n)
	}
	return n, err
}
