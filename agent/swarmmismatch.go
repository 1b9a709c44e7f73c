package agent

// A lease holder that makes up digests and serves bytes to match them
// (issue 24): each chunk it serves passes its check, since the digest the
// coordinator published is its own, and only the whole file fails the pin.
// The member then says which digests it used (api.SwarmReport.Mismatch);
// the coordinator, which knows who published each, refutes that reader
// (withdraws its digests, passes the lease on), and the member reads the
// chunks again. A chunk verified against a digest the coordinator has
// withdrawn or replaced is not verified any more (takePlan, unland).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"slices"

	"github.com/sirupsen/logrus"
)

// wholeAttempts bounds the files one swarm fetch assembles: each that fails
// the pin with digests from peers is reported and read again, and one lying
// lease holder costs one of them. A fetch whose file fails the pin this
// many times, or with digests of its own origin read only, fails, as a
// Fetcher's does (the origin's bytes are not the pin's).
const wholeAttempts = 3

// checkWhole is called once every chunk is verified: whether the file
// matches the pin, and, when it does not and the digests it used came from
// others, reports them, takes back every chunk it did not read from the
// origin itself, and says to go again. When it does not go again, the
// seal that follows fails with the Fetcher's message, and the Gone the
// fetch sends as it ends still names the digests it used.
func (s *swarm) checkWhole(ctx context.Context) (again bool, err error) {
	sum, err := s.digest()
	if err != nil {
		return false, nil // the caller's digest says it
	}
	if sum == "" {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(s.fh, 0, s.size)); err != nil {
			return false, nil // the seal hashes it again, and says why it cannot
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	if sum == s.sum {
		return false, nil
	}
	s.mu.Lock()
	used := make([]string, s.n)
	var named, drop []int
	for i := range s.n {
		if s.ownRead[i] {
			continue
		}
		drop = append(drop, i)
		if used[i] = s.sums[i]; used[i] != "" {
			named = append(named, i)
		}
	}
	s.mismatches++
	tries := s.mismatches
	if len(named) > 0 {
		s.accuse = used
	}
	s.mu.Unlock()
	log := s.log.WithFields(logrus.Fields{"sha256": sum, "pin": s.sum, "chunks_from_peers": len(named), "attempt": tries})
	if len(named) == 0 || tries >= wholeAttempts {
		log.Warn("swarm: every chunk matched its digest and the file does not match the pin; giving up this fetch")
		return false, nil
	}
	log.Warn("swarm: every chunk matched its digest and the file does not match the pin: a reader's digests were false; telling the coordinator whose, and reading the chunks from peers again")
	s.mu.Lock()
	for _, i := range drop {
		s.sums[i] = ""
		// A digest resent for a chunk read from a peer is not this
		// node's to send again.
		delete(s.mine, i)
		delete(s.sent, i)
	}
	s.mu.Unlock()
	s.unland(drop)
	return true, ctx.Err()
}

// unland takes back chunks that were verified against digests found false:
// the chunk server stops offering them, the running digest starts again
// before the first of them, and the sidecar forgets them.
func (s *swarm) unland(idx []int) {
	if len(idx) == 0 {
		return
	}
	for _, i := range idx {
		s.h.unmark(i)
	}
	s.hmu.Lock()
	if slices.Min(idx) < s.hashed {
		s.hsum, s.hashed = nil, 0
	}
	s.hmu.Unlock()
	s.log.WithField("chunks", len(idx)).Info("swarm: chunks verified against digests the coordinator withdrew or replaced are read again")
	s.saveSidecar()
	s.progress()
}
