package coordinator

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// The origin lease: at most one member of a swarm reads the origin, the
// holder, and it keeps the lease by evidence of reading it (issue 24).
// FromOrigin, the holder's own count of origin bytes, was the evidence: a
// holder that made up +1 MiB every 200 ms kept the lease and published no
// digest, and its fabric waited. Now bytes count only up to two chunks past
// the digests the holder published under its lease (a chunk takes about a
// lease timeout on a slow uplink, fanout.sh: counted per chunk only, an
// honest seed lost its lease mid-chunk), and a published digest always
// counts: one that matches the file's recorded list is proof. A holder that
// shows no evidence for swarm_lease_timeout loses the lease and is not given
// it again for evidenceBan while another member can take it; one whose
// digest contradicts the recorded list loses it at once.

const (
	// deadHolderSilence: a lease holder another member cannot reach loses
	// the lease once it has also been silent this long (a killed seed:
	// connection refused).
	deadHolderSilence = 500 * time.Millisecond
	// successorWait is how long the lease is kept for the member furthest
	// ahead before the next asker may take it.
	successorWait = time.Second
	// originAllowance is how many chunks of origin bytes past its published
	// digests a holder's count may claim and still be progress.
	originAllowance = 2
	// evidenceBan is how long a member that lost the lease for want of
	// evidence is passed over for it.
	evidenceBan = time.Minute
	// slowestChunk is the longest a holder's count of origin bytes may take
	// to grow by a chunk and still be progress: for 16 MiB chunks 256 KiB/s
	// (2 Mbit/s), far below any uplink's share. Without a rate a liar
	// adding a byte a report kept the lease for as long as its two chunks
	// of allowance lasted at that pace (months); now for two slowestChunk
	// at most, plus the lease timeout.
	slowestChunk = 64 * time.Second
)

// lease is a swarm's origin lease.
type lease struct {
	holder string
	// heir, until heirUntil, is the member the lease is kept for.
	heir      string
	heirUntil time.Time
	// progressAt is when the holder last showed evidence of reading the
	// origin, or took the lease; leaseAt when it took it.
	progressAt time.Time
	leaseAt    time.Time
	// progressBytes is the holder's count of origin bytes at progressAt.
	progressBytes int64
	// orig0 is the holder's FromOrigin when it took the lease; evidenced
	// the chunks whose digest it gave under this lease.
	orig0     int64
	evidenced map[int]bool
	// dropped0 and have0 are the holder's OriginDiscarded and the chunks
	// it held when it took the lease (digestOverdue).
	dropped0 int64
	have0    bitmap
	// validator is the origin's, as the holder that last published a digest
	// under its lease saw it (api.SwarmPlan.Validator).
	validator string
	// revoked are the members that lost the lease for what they did, not
	// for silence: no evidence of reading, chunks found bad, digests that
	// contradict the recorded list or made a member's file fail the pin
	// (api.SwarmStatus.LeaseRevoked).
	revoked map[string]bool
}

// revoke ends the holder h's lease for what it did (why), and passes it
// over for the lease for evidenceBan.
func (sw *swarms) revoke(s *Server, g *swarm, h *swarmMember, now time.Time, why string) {
	h.noLeaseUntil = now.Add(evidenceBan)
	if g.revoked == nil {
		g.revoked = map[string]bool{}
	}
	g.revoked[h.node] = true
	sw.passLease(s, g, now, why)
}

// minOriginRate is the slowest origin read, in bytes a second, whose bytes
// are progress for a swarm of chunks of chunk bytes.
func minOriginRate(chunk int64) float64 { return float64(chunk) / slowestChunk.Seconds() }

// evidence counts the holder's digest of chunk i, now published.
func (g *swarm) evidence(i int, now time.Time) {
	if g.evidenced[i] {
		return
	}
	g.evidenced[i] = true
	g.progressAt = now
	if h := g.members[g.holder]; h != nil {
		g.progressBytes = h.fromOrig
	}
}

// checkLease ends the holder's lease when it has been silent too long, is
// unreachable and silent a little, has shown no evidence of origin reads
// for the lease timeout, or gives a digest that contradicts the recorded
// list. m is the member reporting rep, its byte counts not yet updated;
// readable says rep's chunk indexes are the swarm's.
func (sw *swarms) checkLease(s *Server, g *swarm, m *swarmMember, rep *api.SwarmReport, readable bool, now time.Time, log *logrus.Entry) {
	if g.holder == m.node {
		// Bytes count up to the allowance past the digests published, and
		// only as fast as an origin read goes: a chunk in slowestChunk at
		// least, since the last progress.
		if rep.FromOrigin > m.fromOrig && rep.FromOrigin-g.orig0 <= int64(len(g.evidenced)+originAllowance)*g.chunkSize &&
			float64(rep.FromOrigin-g.progressBytes) >= minOriginRate(g.chunkSize)*now.Sub(g.progressAt).Seconds() {
			g.progressAt, g.progressBytes = now, rep.FromOrigin
		}
		if readable && g.digestOverdue(m, rep) {
			sw.revoke(s, g, m, now, fmt.Sprintf("its count of origin bytes says it read a whole chunk past the %d chunks it holds and published under the lease, and it gave no digest for it (%d bytes counted since it took the lease, %d of them dropped)",
				g.gained(m), rep.FromOrigin-g.orig0, max(rep.OriginDiscarded-g.dropped0, 0)))
			return
		}
		for i, d := range rep.Sums {
			switch {
			case !readable:
			case g.recorded && g.sums[i] != d:
				sw.revoke(s, g, m, now, fmt.Sprintf("its digest of chunk %d contradicts the file's recorded list", i))
				return
			case g.sums[i] == "":
				// A digest for a chunk nobody published: takeSums counts
				// it once taken; it is progress now.
				g.progressAt, g.progressBytes = now, rep.FromOrigin
			}
		}
	}
	// The holder's lease ends when it has been silent too long, or sooner
	// when a member could not reach it and it has been silent a little:
	// a killed seed must not stall its fabric for the whole timeout.
	if h := g.members[g.holder]; h != nil && h != m {
		silent := now.Sub(h.last)
		dead := false
		if silent >= deadHolderSilence {
			for _, o := range g.members {
				if t, ok := o.unreach[h.node]; ok && o != h && t.After(h.last) {
					dead = true
				}
			}
		}
		switch {
		case silent >= s.cfg.SwarmLeaseTimeout:
			sw.passLease(s, g, now, fmt.Sprintf("silent %v", silent.Round(time.Millisecond)))
		case dead:
			sw.passLease(s, g, now, fmt.Sprintf("unreachable and silent %v", silent.Round(time.Millisecond)))
		}
	}
	// A holder that took the lease a moment ago and has given no digest
	// yet yields it to a member further ahead: after a coordinator
	// restart the first to ask is often a node that joined late, and the
	// seed, which has half the file, would then stop reading while the
	// late joiner read it all again from the origin.
	if h := g.members[g.holder]; h != nil && h != m && len(g.evidenced) == 0 && now.Sub(g.leaseAt) < successorWait &&
		m.verified > h.verified && sw.live(s, m, now) && !g.passedOver(m, now) {
		sw.passLease(s, g, now, fmt.Sprintf("%s is further ahead (%d chunks against %d) and it has read nothing yet", m.node, m.verified, h.verified))
	}
	// A holder whose chunks two members found bad reads nothing its
	// fabric can use.
	if h := g.members[g.holder]; h != nil && len(g.badBy[h.node]) >= badQuorum {
		sw.revoke(s, g, h, now, fmt.Sprintf("%d members found its chunks bad", len(g.badBy[h.node])))
	}
	// Reporting is not progress: a holder whose origin read is stuck (an
	// origin that stopped sending, a request that keeps failing), or that
	// only says it reads, loses the lease after the same timeout as a
	// silent one.
	if h := g.members[g.holder]; h != nil && now.Sub(g.progressAt) >= s.cfg.SwarmLeaseTimeout {
		sw.revoke(s, g, h, now, fmt.Sprintf("no evidence of origin reads for %v: %d digests published under the lease, origin bytes counted %d",
			now.Sub(g.progressAt).Round(time.Millisecond), len(g.evidenced), max(h.fromOrig-g.orig0, 0)))
	}
}

// digestOverdue says whether the holder m's report rep counts more origin
// bytes under the lease than the chunks it gained under it and the one it is
// reading can hold, less those it dropped: its digest of a chunk it read
// whole is overdue. An agent reads the origin in one stream, a chunk at a
// time, hashing as the bytes arrive; it marks a chunk (and reports its
// digest at once) before it counts a byte of the next, reports its count
// before the chunks it marks (agent/swarm.go, report), and reports the bytes
// of a chunk whose read broke off as dropped. So an honest holder's count,
// less what it dropped, is never past one chunk beyond the chunks it gained
// under the lease, whatever its rate, its load or its origin's: that is the
// whole bound, with no timeout in it but for the microseconds between a
// report's two reads when the lease is taken in the middle of a chunk
// (digestSlack). A holder past it counted bytes it does not have: the
// review's liar adding 1 MiB every 200 ms and publishing nothing kept the
// lease for two chunks of allowance and then the lease timeout (11.4 s of a
// 21 s fan-out, fanout.sh --liars); past it, it loses the lease after one
// chunk at the rate it claims.
func (g *swarm) digestOverdue(m *swarmMember, rep *api.SwarmReport) bool {
	read := rep.FromOrigin - g.orig0 - max(rep.OriginDiscarded-g.dropped0, 0)
	return read > int64(g.gained(m)+1)*g.chunkSize+g.chunkSize/digestSlack
}

// digestSlack: digestOverdue allows a holder 1/digestSlack of a chunk over
// its bound. The count and the chunks held are read one after the other in
// a report, and a chunk that lands between the two reads of the report that
// takes the lease is counted as held before its last bytes are counted
// under the lease: microseconds of a stream, a sixteenth of a chunk (1 MiB
// of 16 MiB) being ample even for a report preempted under load.
const digestSlack = 16

// gained is how many chunks the holder m has gained under its lease: the
// chunks it marks that it did not when it took it, or the digests it
// published under it if more (a chunk can be dropped from its claims when
// another reader's digest for it is withdrawn).
func (g *swarm) gained(m *swarmMember) int {
	n := 0
	for i, b := range m.have {
		if i < len(g.have0) {
			b &^= g.have0[i]
		}
		n += bits.OnesCount8(b)
	}
	return max(n, len(g.evidenced))
}

// takeLease gives m the lease when it is free: to the heir, for
// successorWait, or to the first to ask after. A complete member needs no
// origin; a member that lost it for want of evidence waits while another
// can take it; a forger (takeMismatch) never takes it.
func (sw *swarms) takeLease(s *Server, g *swarm, m *swarmMember, now time.Time, log *logrus.Entry) {
	if g.holder != "" || m.complete || g.forged[m.node] || (g.heir != "" && g.heir != m.node && now.Before(g.heirUntil)) {
		// A forger never: none of its digests would be published, and
		// the fabric would wait on its reads.
		return
	}
	if g.passedOver(m, now) && sw.unpassedOther(s, g, m.node, now) {
		return
	}
	g.holder, g.heir = m.node, ""
	g.progressAt, g.leaseAt = now, now
	g.orig0, g.progressBytes = m.fromOrig, m.fromOrig
	g.dropped0, g.have0 = m.origDropped, m.have
	g.evidenced = map[int]bool{}
	g.leaseChanges++
	log.Info("swarm: origin lease taken")
}

// takeValidator keeps the holder's origin validator once it has published
// a digest under its lease: a made-up one from a holder that read nothing
// must not make every later holder's If-Range fail.
func (sw *swarms) takeValidator(g *swarm, m *swarmMember, rep *api.SwarmReport, log *logrus.Entry) {
	if g.holder != m.node || rep.Validator == "" || rep.Validator == g.validator || len(g.evidenced) == 0 {
		return
	}
	if g.validator != "" {
		log.WithFields(logrus.Fields{"was": g.validator, "now": rep.Validator}).Info("swarm: the origin's validator changed with the lease holder's reads")
	}
	g.validator = rep.Validator
}

// live says whether member p of g may be handed the lease now: it reported
// lately (or is held in a wait), is neither complete nor gone.
func (sw *swarms) live(s *Server, p *swarmMember, now time.Time) bool {
	// A member held in a wait (SwarmReport.WaitMs) last spoke up to
	// maxSwarmWait ago and is as live as one that just did.
	return !p.gone && !p.complete && (now.Sub(p.last) <= 2*s.cfg.SwarmReportEvery || !now.After(p.waitUntil))
}

// passedOver says whether p is given the lease only when no other member
// can take it: it lost it for want of evidence lately, two members found
// its chunks bad, or its digests made a member's file fail the pin.
func (g *swarm) passedOver(p *swarmMember, now time.Time) bool {
	return now.Before(p.noLeaseUntil) || len(g.badBy[p.node]) >= badQuorum || g.forged[p.node]
}

// heirOf is the live member of g, other than not, furthest ahead, those
// passed over for the lease (evidenceBan) only when no other is live; ""
// when none is.
func (sw *swarms) heirOf(s *Server, g *swarm, not string, now time.Time) string {
	best, passed := "", ""
	bv, pv := -1, -1
	for _, n := range g.names {
		p := g.members[n]
		if n == not || !sw.live(s, p, now) || g.forged[n] {
			continue
		}
		switch {
		case g.passedOver(p, now):
			if p.verified > pv {
				pv, passed = p.verified, n
			}
		case p.verified > bv:
			bv, best = p.verified, n
		}
	}
	if best == "" {
		return passed
	}
	return best
}

// unpassedOther says whether a live member of g other than not may take
// the lease without being passed over.
func (sw *swarms) unpassedOther(s *Server, g *swarm, not string, now time.Time) bool {
	for _, n := range g.names {
		if p := g.members[n]; n != not && sw.live(s, p, now) && !g.passedOver(p, now) {
			return true
		}
	}
	return false
}

// passLease ends g's lease and keeps it for the live member furthest
// ahead.
func (sw *swarms) passLease(s *Server, g *swarm, now time.Time, why string) {
	old := g.holder
	g.holder = ""
	g.heir = sw.heirOf(s, g, old, now)
	g.heirUntil = now.Add(successorWait)
	// The heir may be waiting for news; this is news.
	g.notify()
	s.log.WithFields(logrus.Fields{"fabric": g.key.fabric, "source": api.RedactSource(g.key.source), "node": old, "heir": g.heir}).
		Infof("swarm: origin lease released (%s)", why)
}
