package agent

// settleLive's decisions on a live stream, on a swarm of one member with a
// real .part: what it keeps, drops and lands.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
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
