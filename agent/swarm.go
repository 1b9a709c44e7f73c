package agent

// The swarm fetch (issue 18, api/swarm.go): one copy per fabric. It lives in
// agent/, not in weights/fetch, because every step of it speaks llmgw's
// protocol (plans from the coordinator, MUNGE credentials to peers, the
// chunk server's registry), which weights/ must not import; it reuses the
// Fetcher's sealing (fetch.Seal) so that a file it renames into the cache
// is verified, synced and tagged exactly as a Fetcher's own.

import (
	"cmp"
	"context"
	"fmt"
	"hash"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// swarmSuffix names the sidecar of a swarm fetch's .part: the verified
// chunks, so that a restarted agent keeps them.
const swarmSuffix = catalog.PartSuffix + ".swarm"

// idlePolls sets the pace of a member with nothing to read: its next report
// asks the coordinator to hold the answer for news up to idlePolls report
// intervals, and against a coordinator that answers at once it asks again
// idlePolls times an interval, so that a chunk its peers verify reaches it
// within a quarter interval, not a whole one per hop of the pipeline.
const idlePolls = 4

// swarmCoord is the coordinator as the swarm fetch uses it.
type swarmCoord interface {
	Swarm(ctx context.Context, r api.SwarmReport) (api.SwarmPlan, error)
}

// swarm is one swarm fetch of one file.
type swarm struct {
	coord        swarmCoord
	codec        munge.Codec
	node, fabric string
	source, sum  string
	size         int64
	target, part string
	origin, peer *http.Client
	files        *holdings
	log          logrus.FieldLogger
	onBytes      func(from string, n int64) // "origin" or "peer"
	onProgress   func(done, total int64)
	// onPeerFailure, when set, is told of each failed read from a peer:
	// "unreachable", "refused", "busy", "slow" or "bad".
	onPeerFailure func(why string)

	chunk int64
	n     int
	// fh is the .part; set before run by a caller that opened it under the
	// Fetcher's locks (fetch.LockFile), else run opens it. For a revision
	// of several files it is rev, which lands each chunk's bytes in their
	// files.
	fh swarmFile
	h  *held
	// rev, when set, is the revision of several files (or one hf: file)
	// this swarm fetches (swarmrev.go): its files laid end to end are the
	// swarm's bytes, each verified against its own digest and named as
	// soon as its last chunk lands, where a single file is sealed at the
	// end against the pin.
	rev *revision

	mu      sync.Mutex
	sums    []string       // known digests, by chunk
	mine    map[int]string // digests this node computed from origin bytes
	acked   int
	bad     map[string]bool
	unreach []string
	down    map[string]time.Time // peer address -> until when it is left alone
	// refusing is, by peer address, when the peer began to answer this
	// member with nothing but failures (shun); a read it serves ends it.
	refusing map[string]time.Time
	// peerBytesIn counts the bytes that arrived from peers, landed or
	// not; watchAt and watchFrom are the start of the lease holder's
	// current window on them and the count then (peersStalled).
	peerBytesIn atomic.Int64
	watchAt     time.Time
	watchFrom   int64
	validator   string
	// alone says the member reads the origin without a plan (withoutPlan);
	// grace, when set, replaces planGrace (tests).
	alone bool
	grace time.Duration
	// staleValidators are validators the origin answered If-Range with
	// the whole file: never sent again by this member (originGet).
	staleValidators map[string]bool
	fromOrigin      atomic.Int64
	// originDiscarded is the part of fromOrigin dropped with a chunk whose
	// origin read broke off (api.SwarmReport.OriginDiscarded).
	originDiscarded atomic.Int64
	// fromPeers counts the bytes of chunks read from peers that landed
	// (verified, written); discarded the peers' bytes thrown away (a cut or
	// stalled stream, a holder change, a digest mismatch). Counted as they
	// arrived, discarded bytes made the coordinator's "from peers" figures
	// and scripts/bench/fanout.sh's "no verified byte fetched twice" check
	// say a survivor of a seed killed mid-chunk fetched twice.
	fromPeers  atomic.Int64
	discarded  atomic.Int64
	candidates []int // chunks on disk that must be verified again

	// sent are the digests of mine the coordinator acknowledged. When the
	// plan's Instance changes (a restarted coordinator knows none) they are
	// sent again, with the digest of every chunk verified here: the
	// coordinator publishes a digest two members resend alike, and the
	// lease holder's, so that a restart costs a report interval, not the
	// chunks read so far. resending are the chunks resent so, and
	// resendPlans how many more plans they are sent with before those the
	// coordinator did not take go back to sent. Under mu.
	sent        map[int]string
	instance    string
	resending   map[int]bool
	resendPlans int

	// verifiedc wakes the lease holder's reporter when it verified a chunk
	// from the origin: its digest is what the fabric waits for, so it goes
	// out at once (one report per chunk of at least 16 MiB) rather than at
	// the next tick.
	verifiedc chan struct{}
	// probed is when this member last checked that the lease holder
	// accepts connections.
	probed time.Time
	// waited says the last report asked the coordinator to wait
	// (SwarmReport.WaitMs), and answeredIn is how long its answer took.
	waited     bool
	answeredIn time.Duration

	// A lease holder that made up digests and served bytes to match them
	// (issue 24): every chunk passes its check and only the whole file
	// fails the pin. ownRead are the chunks this run read from the origin
	// itself, whose digests are its own; accuse, when set, is the
	// Mismatch the run's reports carry until a plan answers one (the
	// digests this node verified its peers' chunks against); mismatches
	// counts this run's files that failed the pin. Under mu.
	ownRead    map[int]bool
	accuse     []string
	mismatches int

	// live is this member's stream of the chunk the lease holder is reading
	// from the origin (liveFetch), nil when none runs; under mu.
	live *liveFetch
	// liveAtDigest is, by chunk, how many of its bytes the live stream had
	// when its digest reached this member: the bytes cut-through moved
	// before the chunk was verified anywhere.
	liveAtDigest map[int]int64
	// liveRefused is the holder and chunk whose live read was refused
	// (416: the holder is reading another chunk; 503: its live slots are
	// full); not asked again until the holder or the chunk changes, where
	// it was asked again at every plan. Under mu.
	liveRefused liveKey

	// The whole file's sha256, computed while the fetch runs: chunks
	// [0, hashed) are in hsum, read back through fh as the verified
	// prefix grows (hashAhead). Without it every node of a fabric read and
	// hashed its whole copy in the same second, when the last chunk
	// arrived, on the same cores: the tail between the origin's last byte
	// and the last node's rename in scripts/bench/fanout.sh.
	hmu    sync.Mutex
	hsum   hash.Hash
	hashed int
	hbuf   []byte
}

func (s *swarm) nChunks() int { return int((s.size + s.chunk - 1) / s.chunk) }

func (s *swarm) bounds(i int) (int64, int64) {
	from := int64(i) * s.chunk
	to := min(from+s.chunk, s.size) - 1
	return from, to
}

// run fetches the file and renames it into place.
func (s *swarm) run(ctx context.Context) error {
	if s.chunk <= 0 {
		// The swarm's first member's chunk size is the swarm's (tests set
		// a smaller one, which a coordinator's swarm_min_chunk allows).
		s.chunk = api.DefaultChunkSize
	}
	s.mine = map[int]string{}
	s.sent = map[int]string{}
	s.bad = map[string]bool{}
	s.down = map[string]time.Time{}
	s.refusing = map[string]time.Time{}
	s.staleValidators = map[string]bool{}
	s.verifiedc = make(chan struct{}, 1)
	s.liveAtDigest = map[int]int64{}
	s.ownRead = map[int]bool{}
	defer s.dropLive()
	if err := os.MkdirAll(filepath.Dir(s.target), 0o755); err != nil {
		return err
	}
	if s.fh == nil {
		fh, err := os.OpenFile(s.part, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer fh.Close()
		s.fh = fh
	}
	fh := s.fh
	var have []byte
	if sc, ok := s.loadSidecar(); ok {
		s.chunk, s.validator = sc.ChunkSize, sc.Validator
		for i, v := range sc.Sums {
			s.mine[i] = v
		}
		st, err := fh.Stat()
		if err == nil && st.Size() == sc.PartSize && st.ModTime().UnixNano() == sc.PartMtimeNS {
			have = sc.Have
		} else {
			for i := 0; i < s.nChunks(); i++ {
				if api.HasChunk(sc.Have, i) {
					s.candidates = append(s.candidates, i)
				}
			}
		}
	}
	if err := fh.Truncate(s.size); err != nil {
		return err
	}
	s.n = s.nChunks()
	// Sized now, not at the first plan: a member without one (withoutPlan)
	// reads the origin with none.
	s.sums = make([]string, s.n)
	s.h = &held{path: s.part, size: s.size, chunkSize: s.chunk, chunked: true, have: have, source: s.source, refresh: s.refreshMembers}
	if s.rev != nil {
		s.rev.start(s)
	}
	s.files.put(s.sum, s.h)
	done := false
	defer func() {
		if !done {
			s.files.drop(s.sum, s.h)
			// Gone: the coordinator drops this member and its lease.
			gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.coord.Swarm(gctx, s.report(false, true))
			cancel()
		}
	}()

	waitFor := time.Duration(0) // the wait the next report asks for
	var last *api.SwarmPlan     // the last plan the coordinator gave
	var refused time.Time       // since when it gives none, zero while it does
	for {
		rep := s.report(false, false)
		rep.WaitMs = int(waitFor / time.Millisecond)
		asked := time.Now()
		plan, err := s.coord.Swarm(ctx, rep)
		s.answeredIn, s.waited = time.Since(asked), waitFor > 0
		waitFor = 0
		if err == nil && rep.Mismatch != nil {
			// Heard: the next reports no longer carry it.
			s.mu.Lock()
			s.accuse = nil
			s.mu.Unlock()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if refused.IsZero() {
				refused = time.Now()
				s.log.WithError(err).Warnf("swarm: no plan from the coordinator; asking again, and reading the origin alone if it gives none for %v", cmp.Or(s.grace, planGrace))
			}
			var ok bool
			if plan, ok = s.withoutPlan(last, refused); !ok {
				if err := sleep(ctx, time.Second); err != nil {
					return err
				}
				continue
			}
		} else {
			if !refused.IsZero() {
				s.log.WithField("after", time.Since(refused).Round(time.Millisecond).String()).Info("swarm: the coordinator plans again")
			}
			refused = time.Time{}
			s.mu.Lock()
			s.alone = false
			s.mu.Unlock()
			last = &plan
			s.takePlan(plan)
		}
		s.reverify()
		if err := s.settleLive(ctx, plan); err != nil {
			return err
		}
		if s.missing() < 0 {
			again, err := s.checkWhole(ctx)
			if err != nil {
				return err
			}
			if !again {
				break
			}
			continue
		}
		every := time.Duration(max(plan.ReportEvery, 100)) * time.Millisecond
		until := time.Now().Add(every)
		switch {
		case plan.Lease && !s.peersHold(plan):
			s.mu.Lock()
			s.watchAt = time.Time{}
			s.mu.Unlock()
			err = s.fromOriginRun(ctx, plan, until)
		default:
			// Without the lease, peers only; with it, what peers hold is
			// still read from them: the origin serves each byte to the
			// fabric once, and a new holder is often behind a complete
			// peer or a relay that got chunks it lacks.
			var idle bool
			idle, err = s.fromPeersRun(ctx, plan, until)
			if idle && err == nil && !plan.Lease {
				// Nothing to read from verified holders: stream the chunk
				// the holder is reading while the report below waits for
				// its digest.
				s.startLive(ctx, plan)
			}
			if idle && err == nil {
				// Nothing to read: the next report asks the coordinator to
				// answer when there is (a peer verified a chunk, a digest
				// came, the lease moved), up to idlePolls report intervals.
				waitFor = idlePolls * every
			}
		}
		if err != nil {
			return err
		}
	}
	if err := s.seal(ctx); err != nil {
		return err
	}
	os.Remove(s.target + swarmSuffix)
	s.h.completeAt(s.target)
	done = true
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if p, err := s.coord.Swarm(cctx, s.report(true, false)); err == nil {
		s.h.setMembers(p)
	}
	return nil
}

// seal verifies the whole file against the pin and renames it into place;
// a revision's files, each verified against its own digest as its last
// chunk landed, are checked to be all there (revision.finish).
func (s *swarm) seal(ctx context.Context) error {
	if s.rev != nil {
		if err := s.rev.finish(ctx); err != nil {
			os.Remove(s.target + swarmSuffix)
			return fmt.Errorf("swarm fetch of %s: %w", s.source, err)
		}
		return nil
	}
	sum, err := s.digest()
	if err != nil {
		return fmt.Errorf("swarm fetch of %s: hashing %s: %w", s.source, s.part, err)
	}
	if err := fetch.SealHashed(ctx, s.fh.(*os.File), s.part, s.target, fetch.Want{SHA256: s.sum, Size: s.size}, sum); err != nil {
		// Every chunk matched its digest and the whole does not: a digest
		// list from a bad origin read. Nothing of it can be trusted.
		os.Remove(s.part)
		os.Remove(s.target + swarmSuffix)
		return fmt.Errorf("swarm fetch of %s: %w", s.source, err)
	}
	return nil
}

// refreshMembers asks the coordinator for a plan now, for the members the
// chunk server may serve (held.admit): a node its latest plan does not
// list asked it for a chunk. After the fetch, the node reports as what it
// is then, complete; the plan's other news is for the run loop's next
// report.
func (s *swarm) refreshMembers(ctx context.Context) error {
	s.h.mu.Lock()
	complete := s.h.complete
	s.h.mu.Unlock()
	p, err := s.coord.Swarm(ctx, s.report(complete, false))
	if err != nil {
		return err
	}
	s.h.setMembers(p)
	return nil
}

// planGrace is how long a member goes on without a plan (the coordinator
// down, restarting, or refusing: its registry full, the node over its
// quota) before it reads the origin alone. A coordinator restart or a
// network blip costs the fabric a pause and no origin byte: every member
// of a fabric reading the origin the moment the coordinator is away would
// be the stampede the swarm exists to prevent. A coordinator away longer,
// or a refusal that lasts, costs one origin read per node, as a node
// without a swarm does; waiting on instead turned every Prolog of the
// fabric into a fetch_deadline failure (issue 24).
const planGrace = 10 * time.Second

// withoutPlan is the plan a member acts on when the coordinator gave none
// since refused, last being the last it gave (nil if none), and false when
// it is to ask again first. A lease holder keeps its lease and reads on:
// the coordinator passes a lease only when it hears another member, and
// when it is back it hears this one first. Any other member reads what it
// knows from the peers it knows for planGrace, then the origin alone, with
// a plan of its own that gives it the lease; its origin read stops at the
// first real plan that does not.
func (s *swarm) withoutPlan(last *api.SwarmPlan, refused time.Time) (api.SwarmPlan, bool) {
	switch {
	case last != nil && last.Lease:
		return *last, true
	case time.Since(refused) >= cmp.Or(s.grace, planGrace):
		every := 250
		if last != nil {
			every = last.ReportEvery
		}
		s.mu.Lock()
		alone := s.alone
		s.alone = true
		s.mu.Unlock()
		if !alone {
			s.log.WithField("for", time.Since(refused).Round(time.Millisecond).String()).Warn("swarm: no plan from the coordinator; reading the origin alone, every chunk checked against its own read and the file against its pin")
		}
		return api.SwarmPlan{Lease: true, ReportEvery: every}, true
	case last != nil:
		p := *last
		return p, true
	}
	return api.SwarmPlan{}, false
}

// report is what the member tells the coordinator now.
func (s *swarm) report(complete, gone bool) api.SwarmReport {
	// The origin counts before the chunks held: a byte of the next chunk
	// is counted only after the chunk before it is marked (fromOriginRun),
	// so a report never counts more origin bytes than the chunks it marks
	// and the one being read. The coordinator holds a lease holder to
	// that (coordinator/swarmlease.go, digestOverdue); read the other way
	// round, a chunk landing in between made an honest holder look a chunk
	// ahead of its digests.
	fromOrigin, originDiscarded := s.fromOrigin.Load(), s.originDiscarded.Load()
	s.h.mu.Lock()
	have := append([]byte(nil), s.h.have...)
	mv := s.h.membersVersion
	s.h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := api.SwarmReport{MembersVersion: mv, Node: s.node, Source: s.source, SHA256: s.sum, Size: s.size, ChunkSize: s.chunk, Have: have,
		Complete: complete, Gone: gone, FromOrigin: fromOrigin, OriginDiscarded: originDiscarded, FromPeers: s.fromPeers.Load(),
		Unreachable: s.unreach, Validator: s.validator, Mismatch: s.accuse}
	s.unreach = nil
	for p := range s.bad {
		r.Bad = append(r.Bad, p)
	}
	if len(s.mine) > 0 {
		r.Sums = map[int]string{}
		for i, v := range s.mine {
			r.Sums[i] = v
		}
	}
	return r
}

func (s *swarm) takePlan(p api.SwarmPlan) {
	s.h.setMembers(p)
	// Chunks verified against a digest the plan withdrew or replaced are
	// taken back once mu is released (deferred first, run last).
	var dropped []int
	defer func() { s.unland(dropped) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	// The same coordinator process: a digest it gave and no longer gives
	// was withdrawn (frozen, or its reader refuted), where a new process
	// knows none yet.
	same := p.Instance != "" && p.Instance == s.instance
	if p.Instance != "" && p.Instance != s.instance {
		if s.instance != "" {
			// Another coordinator process: it has none of the digests
			// this node knows. Send them all again.
			s.resending = map[int]bool{}
			for i, v := range s.sent {
				s.mine[i], s.resending[i] = v, true
			}
			for i, v := range s.sums {
				if v != "" && i < s.n && s.has(i) {
					if _, ok := s.mine[i]; !ok {
						s.mine[i], s.resending[i] = v, true
					}
				}
			}
			s.resendPlans = 4
			s.log.WithField("digests", len(s.resending)).Info("swarm: the coordinator restarted; sending it the digests of the chunks this node holds again")
		}
		s.instance = p.Instance
	}
	s.h.mu.Lock()
	if p.ChunkSize > 0 && p.ChunkSize != s.chunk && s.fromOrigin.Load()+s.fromPeers.Load()+s.discarded.Load() == 0 && len(s.h.have) == 0 && len(s.candidates) == 0 {
		// Nothing fetched yet: take the swarm's chunk size.
		s.chunk = p.ChunkSize
		s.h.chunkSize = p.ChunkSize
		s.n = s.nChunks()
	}
	s.h.mu.Unlock()
	if len(s.sums) < s.n {
		s.sums = append(s.sums, make([]string, s.n-len(s.sums))...)
	}
	for i, v := range p.Sums {
		if i < s.n && s.sums[i] != "" && s.sums[i] != v && (v != "" || same) && !s.ownRead[i] {
			// A chunk verified against it is not verified any more: its
			// bytes are a liar's, or another reader's of other bytes.
			// Served on, it would be found bad by the peers that read it
			// against the new digest, and accused.
			if s.has(i) {
				dropped = append(dropped, i)
			}
			s.sums[i] = v
			continue
		}
		if i < s.n && v != "" {
			if s.sums[i] == "" && s.live != nil && s.live.i == i {
				s.liveAtDigest[i] = s.live.got.Load()
			}
			s.sums[i] = v
		}
	}
	for i, v := range s.mine {
		if s.sums[i] == "" {
			s.sums[i] = v
		}
	}
	// Acknowledged digests are the coordinator's now: stop resending them,
	// keeping those it has not stored.
	if p.SumsKnown > 0 {
		for i, v := range s.mine {
			if i < len(p.Sums) && p.Sums[i] == v {
				s.sent[i] = v
				delete(s.mine, i)
			}
		}
	}
	if s.resendPlans > 0 {
		if s.resendPlans--; s.resendPlans == 0 {
			// Resent and not taken (no second member has them, nor the
			// holder): not sent in every report from now on.
			for i := range s.resending {
				if v, ok := s.mine[i]; ok {
					s.sent[i] = v
					delete(s.mine, i)
				}
			}
			s.resending = nil
		}
	}
	if s.validator == "" {
		s.validator = p.Validator
	}
}

// reverify counts chunks found on disk after a crash only once they match
// a known digest.
func (s *swarm) reverify() {
	var left []int
	for _, i := range s.candidates {
		s.mu.Lock()
		want := s.sums[i]
		s.mu.Unlock()
		if want == "" {
			left = append(left, i)
			continue
		}
		from, to := s.bounds(i)
		buf := make([]byte, to-from+1)
		if _, err := s.fh.ReadAt(buf, from); err == nil && hexSum(buf) == want {
			s.landed(i)
		}
	}
	s.candidates = left
	s.saveSidecar()
}

// missing is the first chunk not verified here, or -1 when none is.
func (s *swarm) missing() int {
	for i := 0; i < s.n; i++ {
		if !s.has(i) {
			return i
		}
	}
	return -1
}

func (s *swarm) has(i int) bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return api.HasChunk(s.h.have, i)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
