package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json/jsontext"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/prefetch"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/internal/jsonlite"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Report bounds. They are far above any real node (a node with thousands
// of models is a mistake) and low enough that one report cannot make the
// coordinator allocate without limit. A report over them is refused whole:
// storing part of a node's weights would say it lacks the rest.
const (
	MaxWeights   = 4096
	MaxFetches   = 64
	MaxDirs      = 256
	MaxPath      = catalog.MaxPath
	maxShortText = 256  // ids, versions, model ids, revisions
	maxErrors    = 32   // error lines kept per report
	maxErrorText = 1024 // bytes kept of each
)

// DefaultFabric is the fabric of a node that reports none; see
// api.DefaultFabric.
const DefaultFabric = api.DefaultFabric

// validReport checks a report before it is queued and normalises what may
// be normalised (an empty fabric, over-long error lines). It returns an
// *api.Error naming the first problem.
func validReport(r *api.Report) error {
	if err := api.ValidNodeName(r.Node); err != nil {
		return api.Errorf(api.CodeInvalid, "report: %v", err)
	}
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeInvalid, "report from %s: %s", r.Node, fmt.Sprintf(format, args...))
	}
	if r.Fabric == "" {
		r.Fabric = DefaultFabric
	}
	if err := api.ValidFabricName(r.Fabric); err != nil {
		return bad("%v", err)
	}
	stripReportText(r)
	if err := shortText("id", r.ID); err != nil {
		return bad("%v", err)
	}
	if err := shortText("agent_version", r.AgentVersion); err != nil {
		return bad("%v", err)
	}
	if r.Seq < 0 {
		return bad("seq is %d; it counts up from 0", r.Seq)
	}
	if len(r.Weights) > MaxWeights {
		return bad("lists %d weights; the limit is %d", len(r.Weights), MaxWeights)
	}
	if len(r.Fetches) > MaxFetches {
		return bad("lists %d fetches; the limit is %d", len(r.Fetches), MaxFetches)
	}
	if len(r.Dirs) > MaxDirs {
		return bad("lists %d directories; the limit is %d", len(r.Dirs), MaxDirs)
	}
	if r.Cache.Dir != "" {
		if err := catalog.CheckAbsPath("cache dir", r.Cache.Dir); err != nil {
			return bad("%v", err)
		}
	}
	if r.Cache.FreeBytes < 0 || r.Cache.TotalBytes < 0 {
		return bad("cache sizes are negative")
	}
	if hf := r.HFCache; hf != nil {
		if err := catalog.CheckAbsPath("hf_cache", hf.Dir); err != nil {
			return bad("%v", err)
		}
		if hf.FreeBytes < 0 || hf.TotalBytes < 0 {
			return bad("hf_cache sizes are negative")
		}
	}
	if r.GPUMemory < 0 {
		return bad("gpu_memory_bytes is negative; send 0 when unknown")
	}
	if r.PeerAddr != "" {
		if err := validPeerAddr(r.PeerAddr); err != nil {
			return bad("peer_addr %.80q: %v; set agent.toml peer_addr to the chunk server's host:port on the fabric, or peer_interface", r.PeerAddr, err)
		}
	}
	// Agents list their weights in path order, so a duplicate is the path
	// just before; a map of every path (an allocation per report, and
	// most of this loop's time) is built only for a list out of order.
	var seen map[string]struct{}
	prev := ""
	for i := range r.Weights {
		w := &r.Weights[i]
		if err := catalog.CheckAbsPath("weight path", w.Path); err != nil {
			return bad("weights[%d]: %v", i, err)
		}
		p := catalog.CleanPath(w.Path)
		if seen == nil && i > 0 && p <= prev {
			if p == prev {
				return bad("lists weights at %q twice", p)
			}
			seen = make(map[string]struct{}, len(r.Weights))
			for _, v := range r.Weights[:i] {
				seen[catalog.CleanPath(v.Path)] = struct{}{}
			}
		}
		if seen != nil {
			if _, dup := seen[p]; dup {
				return bad("lists weights at %q twice", p)
			}
			seen[p] = struct{}{}
		}
		prev = p
		if w.Size < 0 {
			return bad("weights at %q have negative size %d", p, w.Size)
		}
		for _, f := range []struct{ name, v string }{{"model_id", w.ModelID}, {"revision", w.Revision}} {
			if err := shortText(f.name, f.v); err != nil {
				return bad("weights at %q: %v", p, err)
			}
		}
		w.Problem = clip(w.Problem, maxErrorText)
	}
	sources := make(map[string]struct{}, len(r.Fetches))
	for i, f := range r.Fetches {
		if f.Source == "" || len(f.Source) > MaxPath || strings.ContainsRune(f.Source, 0) || !utf8.ValidString(f.Source) {
			return bad("fetches[%d]: source must be 1 to %d bytes of text without NUL", i, MaxPath)
		}
		if _, dup := sources[f.Source]; dup {
			return bad("lists a fetch of %q twice", f.Source)
		}
		sources[f.Source] = struct{}{}
		if f.Done < 0 || f.Total < -1 || f.Rate < 0 {
			return bad("fetch of %q has negative progress", f.Source)
		}
	}
	if err := prefetch.CheckReport(r); err != nil {
		return bad("%v", err)
	}
	// Error lines are for people; a chatty agent loses lines, not its report.
	if len(r.Errors) > maxErrors {
		r.Errors = r.Errors[len(r.Errors)-maxErrors:]
	}
	for i := range r.Errors {
		r.Errors[i] = clip(r.Errors[i], maxErrorText)
	}
	return nil
}

// maxPeerAddr bounds peer_addr: a DNS name's 253 bytes, an IPv6 literal's
// brackets, a colon and a port. It goes out in every plan of the node's
// swarms; a 7 MiB one did (issue 24).
const maxPeerAddr = 253 + 2 + 1 + 5

// validPeerAddr checks a chunk server address: host:port, the host an IP
// address (no zone) or a DNS name, the port 1-65535. It cannot check that
// the address is the node's: the fabric's interface is not the address
// Slurm knows the node by; a chunk server's answers are checked chunk by
// chunk by its readers, and its requests' credentials by it.
func validPeerAddr(a string) error {
	if len(a) > maxPeerAddr {
		return fmt.Errorf("%d bytes; a host:port is at most %d", len(a), maxPeerAddr)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("port %q is not 1-65535", port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Errorf("%s is no address a peer can dial", host)
		}
		return nil
	}
	if !validHostname(host) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}

// validHostname says whether h is a DNS name: dot-separated labels of
// letters, digits and '-', none empty or over 63 bytes, none starting or
// ending with '-'.
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func shortText(name, v string) error {
	if len(v) > maxShortText || strings.ContainsRune(v, 0) || !utf8.ValidString(v) {
		return fmt.Errorf("%s must be at most %d bytes of text without NUL", name, maxShortText)
	}
	return nil
}

func clip(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// queued is one report waiting for its batch.
type queued struct {
	r *api.Report
	// key fingerprints the report's weights as sent (the raw JSON) and its
	// cache dir; same says the handler found it equal to the node's last
	// stored key and left the weights undecoded.
	key  [32]byte
	same bool
	done chan ingestResult
}

// ingestResult is how a report fared: stored, dropped as older than what
// is stored, failed, or sent back for its weights (retry) because they
// changed after the handler looked.
type ingestResult struct {
	stored bool
	retry  bool
	err    error
}

// ReportAnswer is the body of a 202 answer to a report; see api.ReportAnswer.
type ReportAnswer = api.ReportAnswer

// wireReport is a report as decoded from the wire: everything but the
// weights, which stay raw until needed. Nearly every report lists exactly
// the weights its node listed last time, and decoding them was most of the
// cost of handling one; identical bytes need no second look. A report whose
// weights are new to the coordinator (every node's first, and every node's
// first after a restart, since the fingerprints live in memory) has them
// decoded from the raw bytes by decodeWeights, which is fast enough that
// decoding them in the same pass as the rest no longer pays (it did with
// encoding/json: 38 µs against 49 µs for the benchmark's 50 weights).
type wireReport struct {
	api.Report
	Weights wireWeights `json:"weights"`
}

// wireWeights is a report's weights as sent.
type wireWeights struct {
	body []byte // the whole report, which raw is part of
	raw  []byte
}

// gotBody is called by decode with the body before it is decoded.
func (w *wireReport) gotBody(body []byte) { w.Weights.body = body }

func (w *wireWeights) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	// The offset is just past the member's name; the value follows after
	// the colon and any blanks.
	start := dec.InputOffset()
	if err := dec.SkipValue(); err != nil {
		return err
	}
	end := dec.InputOffset()
	if start < 0 || end > int64(len(w.body)) || start > end {
		return fmt.Errorf("weights at offsets %d to %d of a %d-byte report", start, end, len(w.body))
	}
	w.raw = bytes.TrimLeft(w.body[start:end], " \t\r\n:")
	return nil
}

func weightsKey(raw []byte, cacheDir string) [32]byte {
	h := sha256.New()
	h.Write(raw)
	h.Write([]byte{0})
	h.Write([]byte(cacheDir))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// decodeWeights decodes raw weights into r, as strictly as the rest of the
// report: through weightsLite when it can, else (and for every error)
// through encoding/json.
func decodeWeights(raw []byte, r *api.Report) error {
	r.Weights = nil
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if ws, ok := weightsLite(raw); ok {
		r.Weights = ws
		return nil
	}
	if err := unmarshalStrict(raw, &r.Weights); err != nil {
		return api.Errorf(api.CodeInvalid, "report from %.40q: weights are not the JSON expected: %v", r.Node, err)
	}
	return nil
}

func (s *Server) postReport(w http.ResponseWriter, r *http.Request) error {
	var wire wireReport
	if err := decode(w, r, MaxReportBytes, "report", &wire); err != nil {
		s.metrics.reports.WithLabelValues("invalid").Inc()
		return err
	}
	rep := &wire.Report
	raw := wire.Weights.raw
	key := weightsKey(raw, rep.Cache.Dir)
	same := len(raw) > 0 && s.view.sameWeights(rep.Node, key)
	decoded := false
	for {
		if !same && !decoded {
			if err := decodeWeights(raw, rep); err != nil {
				s.metrics.reports.WithLabelValues("invalid").Inc()
				return err
			}
			decoded = true
		}
		if err := validReport(rep); err != nil {
			s.metrics.reports.WithLabelValues("invalid").Inc()
			return err
		}
		if err := s.speaksFor(r, rep.Node); err != nil {
			s.metrics.reports.WithLabelValues("invalid").Inc()
			return err
		}
		if len(s.cfg.FabricFeatures) > 0 {
			// Slurm's word on the node's fabric, not the node's (fabric.go).
			if _, err := s.checkFabric(r.Context(), rep.Node, rep.Fabric); err != nil {
				s.metrics.reports.WithLabelValues("invalid").Inc()
				return err
			}
		}
		res, err := s.submit(r, &queued{r: rep, key: key, same: same, done: make(chan ingestResult, 1)})
		if err != nil {
			return err
		}
		if res.retry && same {
			same = false
			continue
		}
		if res.err != nil {
			return res.err
		}
		ans := ReportAnswer{Result: "stored", CatalogTag: s.catalogTag()}
		if !res.stored {
			ans.Result = "dropped"
		} else {
			// A gc request waiting for this node rides on the answer: the
			// coordinator has no other way to reach it.
			ans.GC = s.gcAsk(r.Context(), rep.Node)
			// So do the seed asks, at every report until the node holds
			// the model.
			ans.Seed = s.seedAsks(r.Context(), rep.Node)
			// And the prefetches backfill's plans want of it (issue 28).
			if s.prefetch != nil {
				s.prefetch.Observe(rep.Node, rep)
				ans.Prefetch = s.prefetch.Asks(rep.Node)
			}
		}
		writeAnswer(w, &ans)
		return nil
	}
}

// writeAnswer writes a report's answer as writeJSON does. Nearly every
// answer is a result and the catalog's tag alone, and those are written
// without encoding/json's reflection; any other goes through writeJSON.
func writeAnswer(w http.ResponseWriter, ans *ReportAnswer) {
	if ans.GC != nil || ans.Seed != nil || ans.Prefetch != nil {
		writeJSON(w, http.StatusAccepted, ans)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write(appendAnswer(make([]byte, 0, 64+len(ans.CatalogTag)), ans))
}

// appendAnswer appends a ReportAnswer of a result and a catalog tag as
// json.Encoder writes it, newline included.
func appendAnswer(b []byte, ans *ReportAnswer) []byte {
	b = append(b, `{"result":`...)
	b = jsonlite.AppendString(b, ans.Result)
	if ans.CatalogTag != "" {
		b = append(b, `,"catalog_tag":`...)
		b = jsonlite.AppendString(b, ans.CatalogTag)
	}
	return append(b, "}\n"...)
}

// submit queues q for the writer and waits for its batch to commit: an
// agent that got 202 never has to wonder whether its report was kept.
func (s *Server) submit(r *http.Request, q *queued) (ingestResult, error) {
	select {
	case s.queue <- q:
	case <-s.stop:
		return ingestResult{}, api.Errorf(api.CodeUnavailable, "the coordinator is shutting down; report again")
	case <-r.Context().Done():
		return ingestResult{}, r.Context().Err()
	}
	select {
	case res := <-q.done:
		return res, nil
	case <-s.done:
		// The writer stopped; it may have answered on its way out.
		select {
		case res := <-q.done:
			return res, nil
		default:
			return ingestResult{}, api.Errorf(api.CodeUnavailable, "the coordinator is shutting down; report again")
		}
	}
}

// writer is the one goroutine that writes reports. It takes the first
// queued report and every report queued behind it (up to MaxBatch), and
// commits them in one transaction: group commit. Reports that arrive while
// a batch commits form the next batch, so batches grow with the load and
// cost nothing when idle. The writer also waits up to MaxBatchWait for a
// batch to fill, and no longer: the reports in flight are bounded by the
// agents' connections, so a batch may never fill, and a long wait would
// only stall the writer.
func (s *Server) writer() {
	defer close(s.done)
	batch := make([]*queued, 0, s.cfg.MaxBatch)
	var timer *time.Timer
	for {
		batch = batch[:0]
		select {
		case q := <-s.queue:
			batch = append(batch, q)
		case <-s.stop:
			// Answer what is queued, then stop.
			for {
				select {
				case q := <-s.queue:
					s.commit([]*queued{q})
				default:
					return
				}
			}
		}
	drain:
		for len(batch) < s.cfg.MaxBatch {
			select {
			case q := <-s.queue:
				batch = append(batch, q)
			default:
				break drain
			}
		}
		if s.cfg.MaxBatchWait > 0 && len(batch) < s.cfg.MaxBatch {
			if timer == nil {
				timer = time.NewTimer(s.cfg.MaxBatchWait)
			} else {
				timer.Reset(s.cfg.MaxBatchWait)
			}
		wait:
			for len(batch) < s.cfg.MaxBatch {
				select {
				case q := <-s.queue:
					batch = append(batch, q)
				case <-timer.C:
					break wait
				case <-s.stop:
					break wait // commit what is here; the loop then stops
				}
			}
			timer.Stop()
		}
		s.commit(batch)
	}
}

// commit stores a batch and answers each report in it. When the batch
// fails, each report is retried alone, so one report the database rejects
// fails only itself.
func (s *Server) commit(batch []*queued) {
	s.batches.Add(1)
	s.batched.Add(int64(len(batch)))
	res, err := s.ingest(batch)
	if err != nil && len(batch) > 1 {
		for _, q := range batch {
			s.commit([]*queued{q})
		}
		return
	}
	if err != nil {
		s.log.WithError(err).WithField("node", batch[0].r.Node).Error("storing a report failed")
		err = api.Errorf(api.CodeUnavailable, "the coordinator could not store the report (database: %v); report again", err)
		for _, q := range batch {
			q.done <- ingestResult{err: err}
		}
		return
	}
	for i, q := range batch {
		q.done <- res[i]
	}
}

func (s *Server) ingest(batch []*queued) ([]ingestResult, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res := make([]ingestResult, len(batch))
	in := make([]store.Incoming, 0, len(batch))
	idx := make([]int, 0, len(batch))
	// inBatch marks nodes already passed on in this batch. An "unchanged"
	// report was judged against the last committed weights; a report of the
	// same node ahead of it in this batch may change them (or be dropped as
	// older), so that judgement no longer holds and it is sent back to be
	// decoded. Two reports of one node in a batch are rare: an agent that
	// timed out and reported again while its first report was queued.
	inBatch := make(map[string]bool, len(batch))
	for i, q := range batch {
		// Keys change only in this goroutine, under writeMu: this check is
		// the authoritative one; the handler's was a guess.
		if q.same && (inBatch[q.r.Node] || s.view.keys[q.r.Node] != q.key) {
			res[i].retry = true
			continue
		}
		inBatch[q.r.Node] = true
		in = append(in, store.Incoming{Report: q.r, SameWeights: q.same})
		idx = append(idx, i)
	}
	// No deadline: the driver runs every statement of a cancellable context
	// in a goroutine of its own so that it can interrupt it, which costs
	// more than the statement. busy_timeout already bounds the one wait a
	// write can have.
	out, err := s.db.IngestBatch(context.Background(), in, s.now())
	if err != nil {
		s.dbOK.Store(false)
		s.metrics.dbErrors.WithLabelValues("ingest").Inc()
		if len(batch) == 1 {
			s.metrics.reports.WithLabelValues("error").Inc()
		}
		return nil, err
	}
	s.dbOK.Store(true)
	var stored []storedNode
	dropped := 0
	for j, o := range out {
		i := idx[j]
		switch {
		case o.NeedWeights:
			res[i].retry = true
		case o.Stored:
			res[i].stored = true
			stored = append(stored, storedNode{node: o.Node, key: batch[i].key, same: batch[i].same})
		default:
			dropped++
		}
	}
	s.metrics.reports.WithLabelValues("stored").Add(float64(len(stored)))
	s.metrics.reports.WithLabelValues("dropped").Add(float64(dropped))
	b, changed := s.view.update(stored, s.staleAfter)
	if b > 0 {
		s.metrics.fetched.Add(float64(b))
	}
	if changed {
		s.features.poke()
	}
	return res, nil
}
