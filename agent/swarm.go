package agent

// The swarm fetch (issue 18, api/swarm.go): one copy per fabric. It lives in
// agent/, not in weights/fetch, because every step of it speaks llmgw's
// protocol (plans from the coordinator, MUNGE credentials to peers, the
// chunk server's registry), which weights/ must not import; it reuses the
// Fetcher's sealing (fetch.Seal) so that a file it renames into the cache
// is verified, synced and tagged exactly as a Fetcher's own.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/munge"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// swarmSuffix names the sidecar of a swarm fetch's .part: the verified
// chunks, so that a restarted agent keeps them.
const swarmSuffix = catalog.PartSuffix + ".swarm"

// peerParallel is how many chunks a member reads from peers at once, each
// from a different peer where it can: one slow or dying peer then holds up
// a third of the flow, not all of it.
const peerParallel = 3

// peerStall is how long a peer's body may send nothing before the read is
// given up and the chunk asked of another holder: a relay that hangs
// without closing (a stopped process, a wedged disk) must cost its readers
// no more than the relay that dies, within the 2 s issue 18 allows.
const peerStall = time.Second

// liveFloorRate is the slowest the rest of a live chunk may come once its
// digest is out, as fetch's fetch_min_speed default is for an origin
// connection: a holder that trickles (a byte every 900 ms escapes
// peerStall) would otherwise hold settleLive, and the member's reports,
// without limit.
const liveFloorRate = fetch.DefaultMinSpeed

// peerDownFor is how long a peer that failed a read is left alone by this
// member, whatever the plans say: a plan can list it again before the
// coordinator has heard it is unreachable, and a hung peer costs a
// peerStall every time it is tried.
const peerDownFor = 5 * time.Second

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

// sidecar is what survives a crash of a swarm fetch.
type sidecar struct {
	SHA256    string         `json:"sha256"`
	Size      int64          `json:"size"`
	ChunkSize int64          `json:"chunk_size"`
	Have      []byte         `json:"have"`
	Sums      map[int]string `json:"sums,omitempty"` // chunks this node hashed from the origin
	Validator string         `json:"validator,omitempty"`
	// PartSize and PartMtimeNS are the .part's as they were when Have was
	// written: a .part changed since (a write the sidecar did not see) has
	// its chunks verified again before they count.
	PartSize    int64 `json:"part_size"`
	PartMtimeNS int64 `json:"part_mtime_ns"`
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

	chunk int64
	n     int
	// fh is the .part; set before run by a caller that opened it under the
	// Fetcher's locks (fetch.LockFile), else run opens it.
	fh *os.File
	h  *held

	mu         sync.Mutex
	sums       []string       // known digests, by chunk
	mine       map[int]string // digests this node computed from origin bytes
	acked      int
	bad        map[string]bool
	unreach    []string
	down       map[string]time.Time // peer address -> when it failed
	validator  string
	fromOrigin atomic.Int64
	// fromPeers counts the bytes of chunks read from peers that landed
	// (verified, written); discarded the peers' bytes thrown away (a cut or
	// stalled stream, a holder change, a digest mismatch). Counted as they
	// arrived, discarded bytes made the coordinator's "from peers" figures
	// and scripts/bench/fanout.sh's "no verified byte fetched twice" check
	// say a survivor of a seed killed mid-chunk fetched twice.
	fromPeers  atomic.Int64
	discarded  atomic.Int64
	candidates []int // chunks on disk that must be verified again

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
	s.bad = map[string]bool{}
	s.down = map[string]time.Time{}
	s.verifiedc = make(chan struct{}, 1)
	s.liveAtDigest = map[int]int64{}
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
	s.h = &held{path: s.part, size: s.size, chunkSize: s.chunk, have: have}
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
	for {
		rep := s.report(false, false)
		rep.WaitMs = int(waitFor / time.Millisecond)
		asked := time.Now()
		plan, err := s.coord.Swarm(ctx, rep)
		s.answeredIn, s.waited = time.Since(asked), waitFor > 0
		waitFor = 0
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.WithError(err).Warn("swarm: no plan from the coordinator; asking again")
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
			continue
		}
		s.takePlan(plan)
		s.reverify()
		if err := s.settleLive(ctx, plan); err != nil {
			return err
		}
		if s.missing() < 0 {
			break
		}
		every := time.Duration(max(plan.ReportEvery, 100)) * time.Millisecond
		until := time.Now().Add(every)
		switch {
		case plan.Lease && !s.peersHold(plan):
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
	sum, err := s.digest()
	if err != nil {
		return fmt.Errorf("swarm fetch of %s: hashing %s: %w", s.source, s.part, err)
	}
	if err := fetch.SealHashed(ctx, fh, s.part, s.target, fetch.Want{SHA256: s.sum, Size: s.size}, sum); err != nil {
		// Every chunk matched its digest and the whole does not: a digest
		// list from a bad origin read. Nothing of it can be trusted.
		os.Remove(s.part)
		os.Remove(s.target + swarmSuffix)
		return fmt.Errorf("swarm fetch of %s: %w", s.source, err)
	}
	os.Remove(s.target + swarmSuffix)
	s.h.mu.Lock()
	s.h.path, s.h.complete = s.target, true
	s.h.mu.Unlock()
	done = true
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s.coord.Swarm(cctx, s.report(true, false))
	return nil
}

// report is what the member tells the coordinator now.
func (s *swarm) report(complete, gone bool) api.SwarmReport {
	s.h.mu.Lock()
	have := append([]byte(nil), s.h.have...)
	s.h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := api.SwarmReport{Node: s.node, Source: s.source, SHA256: s.sum, Size: s.size, ChunkSize: s.chunk, Have: have,
		Complete: complete, Gone: gone, FromOrigin: s.fromOrigin.Load(), FromPeers: s.fromPeers.Load(),
		Unreachable: s.unreach, Validator: s.validator}
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
	s.mu.Lock()
	defer s.mu.Unlock()
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
		for i := range s.mine {
			if i < len(p.Sums) && p.Sums[i] == s.mine[i] {
				delete(s.mine, i)
			}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.source, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", from, to))
	s.mu.Lock()
	v := s.validator
	s.mu.Unlock()
	if v != "" {
		req.Header.Set("If-Range", v)
	}
	resp, err := s.origin.Do(req)
	if err != nil {
		s.log.WithError(err).Warn("swarm: origin request failed; retrying")
		return sleep(ctx, time.Second)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		if resp.StatusCode == http.StatusOK && v != "" {
			return fmt.Errorf("origin %s changed since this swarm began (If-Range %s answered with the whole file); the pinned sha256 no longer matches what it serves", s.source, v)
		}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return sleep(ctx, time.Second)
		}
		return fmt.Errorf("origin %s answered %s to a range request; a swarm needs an origin that serves ranges", s.source, resp.Status)
	}
	if v == "" {
		if nv := resp.Header.Get("ETag"); nv != "" && !strings.HasPrefix(nv, "W/") {
			v = nv
		} else {
			v = resp.Header.Get("Last-Modified")
		}
		s.mu.Lock()
		s.validator = v
		s.mu.Unlock()
	}
	// Origin bytes are counted as they arrive, not per chunk: the
	// coordinator takes the lease from a holder whose count stops growing
	// for swarm_lease_timeout (5 s), and a 16 MiB chunk over a fabric's
	// share of a slow uplink takes about that long (fanout.sh: 80 Mbit/s
	// for three fabrics, 5 s a chunk). Counted per chunk, a reading seed
	// lost its lease mid-chunk and a second node of its fabric read the
	// origin too (1.24 copies per fabric).
	body := countReader{resp.Body, func(n int) {
		s.fromOrigin.Add(int64(n))
		s.onBytes("origin", int64(n))
	}}
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
			// starts at this chunk.
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
		if s.sums[i] == "" {
			s.sums[i] = sum
		}
		s.mu.Unlock()
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

// landed counts chunk i, verified and written: peers may read it now. Its
// pages are handed to the disk at once, so the fsync before the rename
// finds little left to write (a 256 MiB file written in 85 s otherwise
// left its last 30 s or so of dirty pages to that fsync, on every node at
// the same moment); and the file's running digest moves on.
func (s *swarm) landed(i int) {
	s.h.mark(i)
	from, to := s.bounds(i)
	// Best effort: the fsync in fetch.SealHashed is what makes it durable.
	unix.SyncFileRange(int(s.fh.Fd()), from, to-from+1, unix.SYNC_FILE_RANGE_WRITE)
	if err := s.hashAhead(); err != nil {
		s.log.WithError(err).Debug("swarm: running digest stopped; the file is hashed whole before the rename")
	}
}

// hashAhead feeds the verified prefix's new chunks to the running digest.
// One goroutine at a time: the others go on reading chunks, and whatever
// they verified meanwhile is taken by the next call or by digest.
func (s *swarm) hashAhead() error {
	if !s.hmu.TryLock() {
		return nil
	}
	defer s.hmu.Unlock()
	return s.hashLocked()
}

func (s *swarm) hashLocked() error {
	if s.hsum == nil {
		s.hsum = sha256.New()
	}
	for s.hashed < s.n && s.has(s.hashed) {
		from, to := s.bounds(s.hashed)
		n := int(to - from + 1)
		if cap(s.hbuf) < n {
			s.hbuf = make([]byte, s.chunk)
		}
		b := s.hbuf[:n]
		// Through fh, the inode that is renamed: what is hashed is what
		// the rename publishes (fetch.SealHashed checks fh is still the
		// .part).
		if _, err := s.fh.ReadAt(b, from); err != nil {
			s.hsum, s.hashed = nil, 0
			return err
		}
		s.hsum.Write(b)
		s.hashed++
	}
	return nil
}

// digest is the whole file's sha256 once every chunk is verified: the
// running digest, finished; or "" (fetch.SealHashed then hashes the file
// itself) when it stopped on a read error.
func (s *swarm) digest() (string, error) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if err := s.hashLocked(); err != nil {
		return "", nil
	}
	if s.hashed != s.n {
		return "", fmt.Errorf("chunk %d of %d is not verified", s.hashed, s.n)
	}
	return hex.EncodeToString(s.hsum.Sum(nil)), nil
}

func (s *swarm) progress() {
	if s.onProgress == nil {
		return
	}
	var done int64
	for i := 0; i < s.n; i++ {
		if s.has(i) {
			f, t := s.bounds(i)
			done += t - f + 1
		}
	}
	s.onProgress(done, s.size)
}

func (s *swarm) loadSidecar() (sidecar, bool) {
	var sc sidecar
	b, err := os.ReadFile(s.target + swarmSuffix)
	if err != nil || json.Unmarshal(b, &sc) != nil || sc.SHA256 != s.sum || sc.Size != s.size || sc.ChunkSize <= 0 {
		return sc, false
	}
	return sc, true
}

// saveSidecar writes the verified bitmap beside the .part, atomically, with
// the .part's size and mtime as they are after the last write.
var sidecarMu sync.Mutex

func (s *swarm) saveSidecar() {
	sidecarMu.Lock()
	defer sidecarMu.Unlock()
	st, err := s.fh.Stat()
	if err != nil {
		return
	}
	s.h.mu.Lock()
	have := append([]byte(nil), s.h.have...)
	s.h.mu.Unlock()
	s.mu.Lock()
	sc := sidecar{SHA256: s.sum, Size: s.size, ChunkSize: s.chunk, Have: have, Validator: s.validator,
		PartSize: st.Size(), PartMtimeNS: st.ModTime().UnixNano(), Sums: map[int]string{}}
	for i, v := range s.mine {
		sc.Sums[i] = v
	}
	s.mu.Unlock()
	b, _ := json.Marshal(sc)
	tmp := s.target + swarmSuffix + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, s.target+swarmSuffix)
	}
}

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
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
