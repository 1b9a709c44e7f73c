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
	if s.rev != nil {
		// A revision has no whole-file digest: its key is the digest of
		// its file list, not of its bytes end to end. Each file was
		// checked against its own digest as its last chunk landed
		// (revision.sealFile), and one that failed ended the run naming
		// the digests it used (accuseRange).
		return false, nil
	}
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

// accuseRange is a revision's checkWhole for one of its files, bytes
// from..to of the revision: every chunk of it matched its digest and the
// file does not match its own, so the digests of its chunks this node read
// from peers are false. The reports the run sends as it ends (its Gone)
// name them (api.SwarmReport.Mismatch), and the coordinator refutes the
// reader that published them, so that the fetch asked again reads the
// file from an honest holder or the origin. Chunks read from the origin
// here are this node's own word and name nobody. It says how many chunks
// it named.
func (s *swarm) accuseRange(from, to int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	named := 0
	for i := range s.n {
		f, t := s.bounds(i)
		if t < from || f > to || s.ownRead[i] || i >= len(s.sums) || s.sums[i] == "" {
			continue
		}
		// Added to what an earlier file of the run named, not in place
		// of it (a file and its aliases, or a second bad file).
		if len(s.accuse) != s.n {
			s.accuse = make([]string, s.n)
		}
		s.accuse[i] = s.sums[i]
		named++
	}
	return named
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
