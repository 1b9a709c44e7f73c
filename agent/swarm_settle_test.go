package agent

// settleLive's decisions on a live stream, on a swarm of one member with a
// real .part: what it keeps, drops and lands.

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// settleSwarm is member n1 of a swarm of a file of chunks chunks, with
// nothing verified.
func settleSwarm(t *testing.T, chunks int, chunk int64) *swarm {
	t.Helper()
	dir := t.TempDir()
	part := filepath.Join(dir, "model.bin.part")
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	size := int64(chunks) * chunk
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := &swarm{node: "n1", fabric: "ib-a", size: size, chunk: chunk, n: chunks, fh: fh, part: part,
		target: filepath.Join(dir, "model.bin"), log: log, onBytes: func(string, int64) {},
		mine: map[int]string{}, bad: map[string]bool{}, down: map[string]time.Time{}, liveAtDigest: map[int]int64{},
		sums: make([]string, chunks)}
	s.h = &held{path: part, size: size, chunkSize: chunk}
	return s
}

// finishedLive is a live stream of chunk i from holder that has ended with
// the whole chunk, buf.
func finishedLive(i int, holder string, buf []byte) *liveFetch {
	l := &liveFetch{i: i, holder: holder, cancel: func() {}, done: make(chan struct{}), buf: buf, sum: hexSum(buf)}
	l.got.Store(int64(len(buf)))
	close(l.done)
	return l
}

// TestSettleLiveDropsAFinishedChunkOfAFormerHolder: a live chunk that came
// whole from a holder that then lost the lease, its digest not out, is
// dropped (the digest may never come; kept, it would pin a chunk buffer for
// the rest of the file), whether the lease passed to another member or to
// this one; while its holder keeps the lease it is kept for the digest.
func TestSettleLiveDropsAFinishedChunkOfAFormerHolder(t *testing.T) {
	ctx := context.Background()
	for _, next := range []string{"n2", "n3", "n1"} {
		s := settleSwarm(t, 4, 1<<10)
		l := finishedLive(1, "n2", make([]byte, 1<<10))
		s.live = l
		if err := s.settleLive(ctx, api.SwarmPlan{Holder: next}); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		kept := s.live != nil
		s.mu.Unlock()
		switch {
		case next == l.holder && !kept:
			t.Errorf("a whole live chunk of %s, still the holder, was dropped before its digest came", l.holder)
		case next != l.holder && kept:
			t.Errorf("a whole live chunk of %s was kept, its digest unknown, after the lease passed to %s", l.holder, next)
		}
		if s.has(1) {
			t.Errorf("a live chunk whose digest never came was landed")
		}
	}
}

// TestSettleLiveEndsATrickle: once the digest is out, a holder that sends
// the rest of its live chunk a byte at a time, each within peerStall of
// the last, holds settleLive (and the member's reports) no longer than
// peerStall plus the rest at liveFloorRate; the chunk is then read the
// usual way, nothing of the trickle landed.
func TestSettleLiveEndsATrickle(t *testing.T) {
	const chunk = 16 << 10
	realm := mungetest.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in holder: 206 for the whole chunk, then a byte every
	// 200 ms.
	stop := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(chunk))
		w.WriteHeader(http.StatusPartialContent)
		for range chunk {
			w.Write([]byte{1})
			w.(http.Flusher).Flush()
			select {
			case <-time.After(200 * time.Millisecond):
			case <-r.Context().Done():
				return
			case <-stop:
				return
			}
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	s := settleSwarm(t, 4, chunk)
	s.codec = realm.Start("127.0.0.1")
	s.peer = peerClient()
	s.sum = strings.Repeat("ab", 32)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plan := api.SwarmPlan{Holder: "n2", Peers: []api.SwarmPeer{{Node: "n2", Addr: l.Addr().String()}}}
	s.startLive(ctx, plan)
	s.mu.Lock()
	lf := s.live
	s.mu.Unlock()
	if lf == nil || lf.i != 0 {
		t.Fatalf("no live stream of chunk 0 started: %+v", lf)
	}
	until(t, 5*time.Second, "the trickle began", func() bool { return lf.got.Load() > 0 })
	// The digest comes out.
	s.mu.Lock()
	s.sums[0] = strings.Repeat("cd", 32)
	s.mu.Unlock()
	limit := peerStall + time.Duration(chunk)*time.Second/time.Duration(liveFloorRate)
	settled := make(chan error, 1)
	began := time.Now()
	go func() { settled <- s.settleLive(ctx, plan) }()
	select {
	case err := <-settled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("settleLive still waiting on a trickling holder after %v; peerStall plus the chunk at %d bytes/s is %v", time.Since(began).Round(time.Millisecond), liveFloorRate, limit)
	}
	t.Logf("settleLive gave up on the trickle after %v, %d bytes in", time.Since(began).Round(time.Millisecond), lf.got.Load())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live != nil {
		t.Errorf("the trickling live stream was kept")
	}
	if s.has(0) {
		t.Errorf("a chunk of which a trickle came was landed")
	}
}
