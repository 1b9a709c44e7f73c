package coordinator

import (
	"context"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
)

// The chunk digests of a swarm (issue 24). Every member checks each chunk
// against a digest from the coordinator, never from the peer that sent it,
// and the whole file against the pin, so a wrong digest never makes a wrong
// file; but it costs the fabric: members find honest peers' chunks bad and
// accuse them, or fetch a liar's chunks that the final check then throws
// away. So:
//
//   - A digest is published on the word of an origin reader: the lease
//     holder, or a member that held the lease in this swarm since the
//     coordinator started. No other member's, whatever it claims: a member
//     that says it is complete earns nothing by saying so (its claim once
//     replaced the holder's digests).
//   - In the first seconds of the coordinator's swarm traffic (resendWindow)
//     the members of swarms that ran under a coordinator that restarted
//     resend the digests of the chunks they hold (api.SwarmPlan.Instance).
//     Such a member is a witness, not a reader: a witness's digest is
//     published once a second member offers the same one, and an origin
//     reader's stands against a lone witness. One liar resending made-up
//     digests then publishes none.
//   - Two readers that disagree on a chunk freeze it: no digest is
//     published until a second offer agrees with one of them (two distinct
//     members with one digest, no other digest with two). The members whose
//     digest lost are named in the log and in status.
//   - Once two members reported the whole file verified against the pin
//     while the swarm's list was whole and never changed, the list is the
//     verified file's: every chunk each of them holds matched it, and the
//     whole matched the pin. The catalog records it with the pin
//     (migration 0009) and from then it is every swarm's of the file, in
//     every fabric and after restarts, and no report changes it. One
//     member's claim is not enough: it may be a liar's.

// resendWindow is how long after this process's first swarm report the
// members' resent digests are taken as witnesses': the members of swarms
// that were under way when the coordinator restarted resend theirs on their
// first plan from the new instance, within a report interval or two.
func resendWindow(cfg Config) time.Duration { return 2 * cfg.SwarmLeaseTimeout }

// digests is a swarm's chunk digests and how they stand.
type digests struct {
	// sums are the published digests, by chunk ("" unknown or frozen); by
	// the reader each was taken from ("" when settled by two, or recorded).
	sums []string
	by   []string
	// published counts the non-empty sums.
	published int
	// offers are the digests offered for chunks not published, by digest,
	// each with its offerers (true: an origin reader, false: a witness).
	offers map[int]map[string]map[string]bool
	// refuted counts, per member, its digests that lost to others or
	// contradict the recorded list.
	refuted map[string]int
	// rewritten says a published digest was ever frozen or replaced: the
	// list's history is not clean, and no member's verification proves it.
	rewritten bool
	// recorded says sums are the catalog's list: final.
	recorded bool
	// claims are the members that reported the whole file verified while
	// the list was whole and clean; recording is set while their list is
	// being written.
	claims    map[string]bool
	recording bool
	// forged are the members a whole-file mismatch named as the origin
	// reader of digests it used (takeMismatch): none of their digests is
	// taken, nor are they given the lease while another member can take
	// it, nor offered as a peer, for the swarm's life (a forger that left
	// and came back is still one). accusations counts, per member, its
	// mismatch reports that named someone (maxAccusations).
	forged      map[string]bool
	accusations map[string]int
}

func (d *digests) init(chunks int, recorded []string) {
	d.sums = make([]string, chunks)
	d.by = make([]string, chunks)
	d.offers = map[int]map[string]map[string]bool{}
	d.refuted = map[string]int{}
	d.claims = map[string]bool{}
	d.forged = map[string]bool{}
	d.accusations = map[string]int{}
	if recorded != nil {
		d.setRecorded(recorded)
	}
}

// setRecorded makes list the swarm's digests, for good.
func (d *digests) setRecorded(list []string) {
	copy(d.sums, list)
	for i := range d.by {
		d.by[i] = ""
	}
	d.published = len(d.sums)
	d.offers = map[int]map[string]map[string]bool{}
	d.recorded = true
}

// frozen counts the chunks two members gave different digests for, none
// published.
func (d *digests) frozen() int {
	n := 0
	for _, by := range d.offers {
		if len(by) > 1 {
			n++
		}
	}
	return n
}

// takeSums takes the digests rep offers that its member may give, and
// returns how many of them are now the published ones (SumsKnown). A
// holder's digest that contradicts the recorded list has cost it the lease
// already (checkLease).
func (sw *swarms) takeSums(g *swarm, m *swarmMember, rep *api.SwarmReport, readable bool, now time.Time, log *logrus.Entry) (known int) {
	if !readable || len(rep.Sums) == 0 {
		return 0
	}
	if g.forged[m.node] {
		// Its digests made a member's file fail the pin: nothing it
		// offers is taken again.
		return 0
	}
	holder := g.holder == m.node
	reader := holder || m.held
	witness := !reader && now.Before(sw.resendUntil)
	for _, i := range sortedInts(rep.Sums) {
		d := rep.Sums[i]
		switch {
		case g.sums[i] == d:
			// Published already. Another reader's digest echoed is no
			// evidence of a read; the recorded list's, for a chunk no other
			// member holds, is the best there is: a holder that echoes it
			// and serves other bytes is then accused by its readers.
			known++
			if holder && g.recorded && g.onlyHolder(i) {
				g.evidence(i, now)
				m.held = true
			}
			continue
		case g.recorded:
			// The catalog's list is the verified file's: an origin reader
			// that disagrees read other bytes, or lies.
			g.refuted[m.node]++
			log.WithFields(logrus.Fields{"chunk": i, "recorded": g.sums[i], "offered": d}).Warn("swarm: a member's digest contradicts the file's recorded digest list; ignored")
			continue
		case !reader && !witness:
			continue
		case g.sums[i] != "":
			if !reader || g.by[i] == "" {
				// A witness against a published digest, or anyone against
				// one two members agreed on: the published one stands.
				g.refuted[m.node]++
				continue
			}
			// Two readers disagree: neither is published until a second
			// offer agrees with one of them.
			log.WithFields(logrus.Fields{"chunk": i, "published": g.sums[i], "published_by": g.by[i], "offered": d}).
				Warn("swarm: two origin readers disagree on a chunk's digest; the chunk is frozen until a second read agrees with one")
			g.offers[i] = map[string]map[string]bool{g.sums[i]: {g.by[i]: true}}
			g.sums[i], g.by[i] = "", ""
			g.published--
			g.rewritten = true
		}
		if g.offers[i] == nil {
			g.offers[i] = map[string]map[string]bool{}
		}
		if g.offers[i][d] == nil {
			g.offers[i][d] = map[string]bool{}
		}
		g.offers[i][d][m.node] = reader
		if g.decide(i, log) == d {
			known++
			if holder {
				// An origin reader from now on, in this swarm: its
				// digests count after it passes the lease. Taking the
				// lease is not enough: a holder that published nothing
				// (it only said it read) is not one.
				g.evidence(i, now)
				m.held = true
			}
		}
	}
	return known
}

// decide publishes chunk i's digest when its offers allow, and returns it
// ("" while none is published): the one digest two distinct members
// offered, else the one digest an origin reader offered when no other had
// two; two readers that disagree, or two pairs, leave the chunk frozen.
func (g *swarm) decide(i int, log *logrus.Entry) string {
	var strong, read []string
	for d, by := range g.offers[i] {
		if len(by) >= 2 {
			strong = append(strong, d)
		}
		for _, r := range by {
			if r {
				read = append(read, d)
				break
			}
		}
	}
	win, by := "", ""
	switch {
	case len(strong) == 1:
		win = strong[0]
	case len(strong) == 0 && len(read) == 1:
		win = read[0]
		for n := range g.offers[i][win] {
			by = n
		}
	default:
		return ""
	}
	var losers []string
	for d, offerers := range g.offers[i] {
		if d == win {
			continue
		}
		for n := range offerers {
			g.refuted[n]++
			losers = append(losers, n)
		}
	}
	if len(g.offers[i]) > 1 {
		log.WithFields(logrus.Fields{"chunk": i, "digest": win, "refuted": losers}).Warn("swarm: a chunk's digest settled against other offers")
	}
	g.sums[i], g.by[i] = win, by
	g.published++
	delete(g.offers, i)
	return win
}

// onlyHolder says whether no member but the lease holder holds chunk i.
func (g *swarm) onlyHolder(i int) bool {
	for n, m := range g.members {
		if n != g.holder && (m.complete || api.HasChunk(m.have, i)) {
			return false
		}
	}
	return true
}

// sumsRecord is a file's digest list to record with its pin.
type sumsRecord struct {
	model, source, sha string
	size, chunk        int64
	sums, nodes        []string
}

// claim counts m's report of the whole file verified, and returns the list
// to record when it is the second such report over a whole, clean list.
func (sw *swarms) claim(g *swarm, m *swarmMember, readable bool) *sumsRecord {
	if !m.complete || !readable || g.recorded || g.rewritten || g.published < g.chunks || g.members[m.node] != m {
		return nil
	}
	g.claims[m.node] = true
	if len(g.claims) < 2 || g.recording {
		return nil
	}
	g.recording = true
	return &sumsRecord{model: g.model, source: g.key.source, sha: g.key.sha, size: g.size, chunk: g.chunkSize,
		sums: append([]string(nil), g.sums...), nodes: sortedKeys(g.claims)}
}

// recordSums writes rec with the catalog's pin and makes the list that is
// then recorded (rec's, or one recorded before it) every swarm's of the
// file, and returns it; nil when it could not be written.
func (s *Server) recordSums(ctx context.Context, rec *sumsRecord) []string {
	log := s.log.WithFields(logrus.Fields{"model": rec.model, "source": api.RedactSource(rec.source), "sha256": rec.sha, "verified_by": rec.nodes})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.writeMu.Lock()
	list, err := s.db.RecordChunkSums(ctx, rec.model, rec.source, rec.sha, rec.size, rec.chunk, rec.sums, rec.nodes, s.now())
	s.writeMu.Unlock()
	sw := s.swarms
	sw.mu.Lock()
	defer sw.mu.Unlock()
	fk := fileKey{rec.source, rec.sha, rec.chunk}
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("swarm").Inc()
		log.WithError(err).Error("swarm: recording the file's chunk digests failed; the next complete member tries again")
		for _, g := range sw.byFile[fk] {
			g.recording = false
		}
		return nil
	}
	log.Info("swarm: the file's chunk digests are recorded with its pin; no member's digests change them now")
	for _, g := range sw.byFile[fk] {
		if len(list) != g.chunks || g.recorded {
			continue
		}
		for i, d := range list {
			if g.sums[i] != "" && g.sums[i] != d {
				log.WithFields(logrus.Fields{"fabric": g.key.fabric, "chunk": i, "was": g.sums[i], "now": d}).Warn("swarm: a published digest replaced by the recorded list")
			}
		}
		g.setRecorded(list)
		g.recording = false
		g.notify()
	}
	return list
}

func sortedInts(m map[int]string) []int {
	out := make([]int, 0, len(m))
	for i := range m {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// maxAccusations is how many mismatch reports (api.SwarmReport.Mismatch)
// of one member a swarm acts on: one per liar that held the lease before
// it, bounded, since a report is a member's word and each one it acts on
// costs the fabric a read of the named reader's chunks from the origin.
const maxAccusations = 3

// takeMismatch acts on a member's report that its file, every chunk
// verified, failed the pin (rep.Mismatch: the digests it verified its
// peers' chunks against). Every chunk check passed, so the digests it used
// are false: a lease holder that made up digests and served bytes to match
// them passes every chunk check, and only the whole file tells. The
// coordinator knows who published each digest: those published on one
// origin reader's word name that reader, which is refuted (forged): its
// digests are withdrawn (members drop the chunks they verified against
// them), its offers dropped, it loses the lease and its place as a reader,
// a holder and a peer in this swarm. Nothing is done against the recorded
// list (two members' files matched the pin with it), nor against a reader
// whose digests a third member completed the file with (one member's word
// against another's: the list is recorded at the second), nor for digests
// settled by two members (two colluding liars are not caught here).
func (sw *swarms) takeMismatch(s *Server, g *swarm, m *swarmMember, rep *api.SwarmReport, readable bool, now time.Time, log *logrus.Entry) {
	if !readable || len(rep.Mismatch) == 0 {
		return
	}
	if g.recorded {
		log.Warn("swarm: a member's file failed the pin with chunks of the file's recorded digest list; nobody is named (two members' files matched it: the member's disk, or its word)")
		return
	}
	if g.accusations[m.node] >= maxAccusations {
		log.Warnf("swarm: a member's file failed the pin again; it named readers %d times in this swarm, the limit, and is not heard", maxAccusations)
		return
	}
	named := map[string]int{}
	for i, d := range rep.Mismatch {
		if i < len(g.sums) && d != "" && g.sums[i] == d && g.by[i] != "" && g.by[i] != m.node {
			named[g.by[i]]++
		}
	}
	for p := range named {
		for c := range g.claims {
			if c != p && c != m.node {
				log.WithFields(logrus.Fields{"reader": p, "completed": c}).Warn("swarm: a member's file failed the pin with a reader's digests another member completed the file with; one word against another, nobody is named")
				delete(named, p)
				break
			}
		}
	}
	if len(named) == 0 {
		log.Warn("swarm: a member's file failed the pin, but no digest it used is still published on one reader's word; nobody is named")
		return
	}
	g.accusations[m.node]++
	var gone []byte // the chunks whose digests are withdrawn
	for _, p := range sortedKeys(named) {
		g.forged[p] = true
		g.refuted[p]++
		withdrawn := 0
		for i := range g.sums {
			if g.by[i] == p {
				g.sums[i], g.by[i] = "", ""
				g.published--
				withdrawn++
				gone = api.SetChunk(gone, i)
			}
		}
		// Its offers go too; a chunk frozen between it and another reader
		// is the other's now.
		for i, offers := range g.offers {
			for d, by := range offers {
				delete(by, p)
				if len(by) == 0 {
					delete(offers, d)
				}
			}
			if len(offers) == 0 {
				delete(g.offers, i)
			} else {
				g.decide(i, log)
			}
		}
		delete(g.claims, p)
		if pm := g.members[p]; pm != nil {
			pm.held = false
		}
		g.rewritten = true
		log.WithFields(logrus.Fields{"reader": p, "digests_used": named[p], "withdrawn": withdrawn}).
			Warn("swarm: a member's file failed the pin with digests one origin reader gave; that reader's digests are withdrawn and it reads, holds the lease and serves no more in this swarm")
		if h := g.members[p]; h != nil && g.holder == p {
			sw.revoke(s, g, h, now, "its digests made a member's file fail the pin")
		}
	}
	// What members verified against them is not verified: not offered as
	// a peer's, and not what makes a member the furthest ahead, the
	// lease's heir, until a report of the member no longer claims it (the
	// agents drop those chunks on seeing the digests withdrawn; a report
	// sent before still claims them, and a member further ahead by them
	// took the lease from the new holder mid-chunk). A new slice, never
	// the old one rewritten: plans handed out earlier still reference it.
	for _, o := range g.members {
		if o.complete || o == m {
			continue
		}
		have := slices.Clone(o.have)
		for i := range have {
			if i < len(gone) {
				if x := have[i] & gone[i]; x != 0 {
					if o.suspect == nil {
						o.suspect = make(bitmap, len(have))
					}
					o.suspect[i] |= x
					have[i] &^= x
				}
			}
		}
		o.have, o.verified = have, countBits(have)
	}
	if h := g.members[g.holder]; h == nil && g.heir != "" {
		// The heir was chosen before the members' chunks were taken back.
		g.heir = sw.heirOf(s, g, "", now)
	}
	g.notify()
}
