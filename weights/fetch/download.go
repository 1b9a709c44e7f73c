package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/weights/catalog"
)

// download is one fetch of one remote source into target.
//
// Its only durable state is the .part file and, beside it, the .part.ranges
// file (rangeState): which version of the remote the .part holds bytes of,
// and which of its bytes are done. Everything a later attempt resumes from is
// in those two files, so a killed process loses at most the chunks it was in
// the middle of.
type download struct {
	f      *Fetcher
	rem    remote
	target string
	want   Want
	log    logrus.FieldLogger

	part, statePath string
	token           string
	hubSum          string // the digest the hub published, if any

	done  atomic.Int64 // bytes on disk, for progress
	total atomic.Int64 // -1 until known
}

// errRestart means the bytes on disk cannot be continued: the remote changed
// (If-Range failed, or a server that ignores If-Range answered with another
// validator or size), or a range came back other than asked. The only safe
// thing is to throw them away and start over; splicing two versions of a file
// is what curl -C -, wget -c and aria2c -c were measured doing.
var errRestart = errors.New("the remote changed since the partial download started")

// errIdle is a connection that delivered nothing for IdleTimeout.
type errIdle time.Duration

func (e errIdle) Error() string {
	return fmt.Sprintf("no data received for %s", time.Duration(e))
}

// statusError is an HTTP answer that is not the file.
type statusError struct {
	url        string
	code       int
	status     string
	hint       string
	retryAfter time.Duration
}

func (e *statusError) Error() string {
	if e.url == "" {
		return e.status + e.hint
	}
	return "GET " + e.url + ": " + e.status + e.hint
}

// writeError is a failure to write the .part: never retried, since the disk
// will not get better by asking the origin again.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func (d *download) run(ctx context.Context) (string, error) {
	d.part = d.target + catalog.PartSuffix
	d.statePath = d.target + catalog.RangesSuffix
	d.total.Store(-1)
	if d.rem.hf {
		d.token = d.f.hfToken()
	}
	d.log.WithField("url", redactURL(d.rem.url)).Info("fetch started")
	start := time.Now()

	stop := d.reportProgress()
	defer stop()

	for restarts := 0; ; restarts++ {
		sum, err := d.attempt(ctx)
		if errors.Is(err, errRestart) && restarts < maxRestarts && ctx.Err() == nil {
			d.log.WithError(err).Warn("discarding the partial download and starting over")
			d.discard()
			continue
		}
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				// The *Error names the source; Go's *url.Error would
				// name the URL a second time, or name a redirect target,
				// which for a CDN is a signed URL that must not travel into
				// logs and the agent's reports. Only its host is kept.
				var ue *url.Error
				if errors.As(err, &ue) {
					if ue.URL == d.rem.url {
						err = ue.Err
					} else {
						err = fmt.Errorf("%s %s: %w", ue.Op, redactURL(ue.URL), ue.Err)
					}
				}
				err = &Error{Source: d.rem.source, Op: "get", Err: err}
			}
			// Info: the caller has the error and decides what it is worth.
			d.log.WithError(err).Info("fetch failed")
			return "", err
		}
		d.log.WithFields(logrus.Fields{"path": d.target, "bytes": d.done.Load(), "took": time.Since(start).Round(time.Millisecond)}).Info("fetch finished")
		return sum, nil
	}
}

// discard removes the partial download and its state.
func (d *download) discard() {
	os.Remove(d.statePath)
	os.Remove(d.part)
	d.done.Store(0)
}

// attempt fetches from whatever is on disk to a verified, renamed file.
func (d *download) attempt(ctx context.Context) (string, error) {
	st := loadState(d.statePath, d.rem.source)
	partSize := int64(-1)
	if fi, err := os.Stat(d.part); err == nil {
		partSize = fi.Size()
	}
	if st == nil || partSize < 0 || (!st.Parallel && partSize > st.Size && st.Size >= 0) {
		// Bytes of unknown provenance: without a validator there is no way
		// to ask the origin whether they are still the file's.
		st = nil
		d.discard()
	}

	// The first request. Fresh: bytes=0-, which answers whether ranges
	// work, the size and the validator, and whose body is the first bytes.
	var (
		from, to  = int64(0), int64(-1)
		validator string
	)
	if st != nil {
		validator = st.validator()
		if st.Parallel {
			gaps := st.missing()
			if len(gaps) == 0 {
				return d.finish(ctx, st.Size, "")
			}
			from, to = gaps[0].start, min(gaps[0].end, gaps[0].start+d.chunkSize(st.Size))-1
		} else {
			from = partSize
			if st.Size >= 0 && from == st.Size {
				return d.finish(ctx, st.Size, "")
			}
		}
	}
	b, err := d.open(ctx, from, to, validator)
	if err != nil {
		return "", err
	}
	resp := b.resp
	if d.rem.hf {
		if err := d.checkHub(resp); err != nil {
			b.Close()
			return "", err
		}
	}
	fresh := newState(d.rem.source, resp)

	if resp.StatusCode == http.StatusOK {
		// The server ignored the range, or If-Range said the remote changed.
		// Either way the body is the whole current file: keep nothing.
		if st != nil {
			d.log.Info("the origin sent the whole file to a resume request; starting over")
			d.discard()
		}
		fresh.Size = resp.ContentLength
		if resp.ContentLength < 0 {
			fresh.Size = -1
		}
		if err := d.checkAnnounced(fresh.Size); err != nil {
			b.Close()
			return "", err
		}
		if st != nil && fresh.Size >= 0 && resp.Header.Get("Accept-Ranges") == "bytes" && d.parallel(fresh) {
			// A changed remote answers If-Range with the whole new file, but
			// ranges still work: start over in parallel on the new version.
			b.Close()
			return "", errRestart
		}
		return d.stream(ctx, fresh, b, 0)
	}

	// 206: accept only what was asked, of the version on disk.
	cr, err := parseContentRange(resp.Header.Get("Content-Range"))
	wantTo := to
	if to < 0 {
		wantTo = cr.size - 1
	}
	if err != nil || cr.start != from || cr.end != wantTo || cr.size < 0 {
		b.Close()
		return "", fmt.Errorf("%w: asked for bytes %d-%d, got Content-Range %q", errRestart, from, to, resp.Header.Get("Content-Range"))
	}
	fresh.Size = cr.size
	if st != nil && (cr.size != st.Size || fresh.validator() != st.validator()) {
		b.Close()
		return "", fmt.Errorf("%w: size %d → %d, validator %s → %s", errRestart, st.Size, cr.size, st.validator(), fresh.validator())
	}
	if st == nil {
		st = fresh
		st.Parallel = d.parallel(st)
	}
	if err := d.checkAnnounced(st.Size); err != nil {
		b.Close()
		return "", err
	}
	d.total.Store(st.Size)
	if st.Parallel {
		return d.parallelFetch(ctx, st, b, from)
	}
	return d.stream(ctx, st, b, from)
}

// parallel decides whether a fresh fetch uses several connections: only when
// it can be resumed and checked range by range (a validator), and when it is
// large enough to be worth it.
func (d *download) parallel(st *rangeState) bool {
	return d.f.connections() > 1 && st.validator() != "" && st.Size >= d.f.parallelMin()
}

// checkHub compares the digest the hub publishes with the caller's.
func (d *download) checkHub(resp *http.Response) error {
	d.hubSum = hubSHA256(resp)
	if d.hubSum != "" && d.want.SHA256 != "" && d.hubSum != d.want.SHA256 {
		return &Error{Source: d.rem.source, Op: "verify", Err: fmt.Errorf(
			"the catalog expects sha256 %s but the hub publishes %s for this revision; pin the revision (hf:org/repo@rev/file) or fix the catalog",
			d.want.SHA256, d.hubSum)}
	}
	return nil
}

// checkAnnounced refuses a file whose announced size is not the one the
// caller expects, before a byte of it is fetched: a hundred gigabytes are a
// lot to download only to find they are the wrong ones.
func (d *download) checkAnnounced(size int64) error {
	if d.want.Size > 0 && size >= 0 && size != d.want.Size {
		return &Error{Source: d.rem.source, Op: "verify", Err: fmt.Errorf(
			"size mismatch: expected %d bytes, the origin announces %d", d.want.Size, size)}
	}
	return nil
}

func (d *download) expectedSum() string {
	if d.want.SHA256 != "" {
		return d.want.SHA256
	}
	return d.hubSum
}

// stream fetches with one connection, appending to the .part from off; b is
// the open response whose body starts at off.
func (d *download) stream(ctx context.Context, st *rangeState, b *body, off int64) (string, error) {
	// b is replaced on every reconnect, and is nil after a failed one.
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	d.total.Store(st.Size)
	if err := checkSpace(filepath.Dir(d.part), st.Size-off); err != nil {
		return "", &Error{Source: d.rem.source, Op: "get", Err: err}
	}
	flags := os.O_RDWR | os.O_CREATE
	if off == 0 {
		flags |= os.O_TRUNC
	}
	fh, err := os.OpenFile(d.part, flags, 0o644)
	if err != nil {
		return "", &Error{Source: d.rem.source, Op: "write", Err: err}
	}
	defer fh.Close()
	// The state is written before any byte, so bytes on disk always have a
	// recorded provenance. Without a validator there is nothing to record.
	if st.validator() != "" {
		if err := st.save(d.statePath); err != nil {
			return "", &Error{Source: d.rem.source, Op: "write", Err: err}
		}
	}
	d.done.Store(off)

	// Everything before the write position is final: with a digest to
	// check, a second goroutine hashes it from the page cache as it grows,
	// so verifying costs no second pass after the last byte (and a resumed
	// stream's earlier bytes are hashed too).
	var (
		frontier atomic.Int64
		complete atomic.Bool
		poke     = make(chan struct{}, 1)
		hashed   chan hashResult
	)
	frontier.Store(off)
	wb := &writeBehind{fd: int(fh.Fd()), from: off}
	wrote := func(end int64) {
		wb.wrote(end)
		frontier.Store(end)
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	if d.expectedSum() != "" {
		hctx, hcancel := context.WithCancel(ctx)
		defer hcancel()
		hashed = make(chan hashResult, 1)
		go func() {
			// complete is read first: it is set after the last frontier.
			limit := func() (int64, bool) { c := complete.Load(); return frontier.Load(), c }
			sum, err := hashBehind(hctx, fh, limit, poke)
			hashed <- hashResult{sum, err}
		}()
	}
	for retry := 0; ; {
		n, err := d.copyAt(fh, b, off, -1, wrote)
		off += n
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var we *writeError
		if errors.As(err, &we) {
			return "", &Error{Source: d.rem.source, Op: "write", Err: noSpace(we.err, filepath.Dir(d.part), st.Size-off)}
		}
		if n > 0 {
			retry = 0 // progress: the budget is for a connection that gets nowhere
		}
		if retry++; retry > d.f.retries() {
			return "", err
		}
		if err := d.sleep(ctx, retry, 0, err); err != nil {
			return "", err
		}
		b.Close()
		b = nil
		if st.validator() == "" {
			// Nothing to make a resumed range safe with.
			return "", fmt.Errorf("%w (no ETag or Last-Modified to resume against)", errRestart)
		}
		if b, err = d.open(ctx, off, -1, st.validator()); err != nil {
			return "", err
		}
		if err := d.checkRange(b.resp, st, off, -1); err != nil {
			return "", err
		}
	}
	if st.Size >= 0 && off != st.Size {
		return "", fmt.Errorf("got %d bytes, the origin announced %d", off, st.Size)
	}
	if hashed != nil {
		complete.Store(true)
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	return d.seal(ctx, fh, hashed, off)
}

// seal ends a download whose bytes are all in fh: it takes the digest the
// hashing goroutine computed (when one ran), closes fh, and hands the .part
// to finish for verification and the rename.
func (d *download) seal(ctx context.Context, fh *os.File, hashed <-chan hashResult, size int64) (string, error) {
	sum := ""
	if hashed != nil {
		h := <-hashed
		if h.err != nil {
			return "", &Error{Source: d.rem.source, Op: "verify", Err: h.err}
		}
		sum = h.sum
	}
	if err := fh.Close(); err != nil {
		return "", &Error{Source: d.rem.source, Op: "write", Err: err}
	}
	return d.finish(ctx, size, sum)
}

// checkRange accepts a resumed response only if it is a 206 for exactly the
// bytes asked, of the version on disk. to < 0 means "to the end".
func (d *download) checkRange(resp *http.Response, st *rangeState, from, to int64) error {
	if resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("%w: a range request for bytes %d- was answered %s", errRestart, from, resp.Status)
	}
	cr, err := parseContentRange(resp.Header.Get("Content-Range"))
	if to < 0 {
		to = st.Size - 1
	}
	if err != nil || cr.start != from || cr.end != to || cr.size != st.Size {
		return fmt.Errorf("%w: asked for bytes %d-%d of %d, got Content-Range %q", errRestart, from, to, st.Size, resp.Header.Get("Content-Range"))
	}
	if v := newState(st.Source, resp).validator(); v != "" && v != st.validator() {
		return fmt.Errorf("%w: validator %s → %s", errRestart, st.validator(), v)
	}
	return nil
}

// finish checks the complete .part and renames it into place. sum is the
// digest computed while streaming, or "".
func (d *download) finish(ctx context.Context, size int64, sum string) (string, error) {
	fail := func(op string, err error) (string, error) {
		return "", &Error{Source: d.rem.source, Op: op, Err: err}
	}
	fi, err := os.Stat(d.part)
	if err != nil {
		return fail("verify", err)
	}
	if size >= 0 && fi.Size() != size {
		d.discard()
		return fail("verify", fmt.Errorf("the partial file has %d bytes, the origin announced %d; discarded", fi.Size(), size))
	}
	if d.want.Size > 0 && fi.Size() != d.want.Size {
		d.discard()
		return fail("verify", fmt.Errorf("size mismatch: expected %d bytes, got %d; discarded", d.want.Size, fi.Size()))
	}
	if exp := d.expectedSum(); exp != "" {
		if sum == "" {
			if sum, err = fileSHA256(ctx, d.part); err != nil {
				return fail("verify", err)
			}
		}
		if sum != exp {
			d.discard()
			return fail("verify", fmt.Errorf("sha256 mismatch: expected %s, got %s; discarded", exp, sum))
		}
	}
	fh, err := os.OpenFile(d.part, os.O_RDWR, 0)
	if err != nil {
		return fail("sync", err)
	}
	if sum != "" {
		recordSum(fh, sum)
	}
	err = fh.Sync()
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail("sync", err)
	}
	if err := os.Rename(d.part, d.target); err != nil {
		return fail("rename", err)
	}
	os.Remove(d.statePath)
	if err := syncDir(filepath.Dir(d.target)); err != nil {
		return fail("sync", err)
	}
	d.done.Store(fi.Size())
	d.total.Store(fi.Size())
	return sum, nil
}

// body is an open response whose reads are watched: no byte for IdleTimeout
// cancels the request, and the read error then says so.
type body struct {
	resp   *http.Response
	cancel context.CancelFunc
	timer  *time.Timer
	idle   time.Duration
	idled  atomic.Bool
	once   sync.Once
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.resp.Body.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
	}
	if err != nil && err != io.EOF && b.idled.Load() {
		err = errIdle(b.idle)
	}
	return n, err
}

func (b *body) Close() {
	b.once.Do(func() {
		b.timer.Stop()
		b.resp.Body.Close()
		b.cancel()
	})
}

// open sends one GET for bytes from-to (to < 0: to the end) with If-Range
// when validator is set, retrying network errors, 5xx and 429 with backoff.
// It returns a 200 or 206 response; any other answer is an error.
func (d *download) open(ctx context.Context, from, to int64, validator string) (*body, error) {
	for retry := 0; ; {
		b, err := d.openOnce(ctx, from, to, validator)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryable(err) {
			return nil, err
		}
		if retry++; retry > d.f.retries() {
			return nil, err
		}
		var se *statusError
		after := time.Duration(0)
		if errors.As(err, &se) {
			after = se.retryAfter
		}
		if err := d.sleep(ctx, retry, after, err); err != nil {
			return nil, err
		}
	}
}

func (d *download) openOnce(ctx context.Context, from, to int64, validator string) (*body, error) {
	rctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, d.rem.url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	rng := "bytes=" + strconv.FormatInt(from, 10) + "-"
	if to >= 0 {
		rng += strconv.FormatInt(to, 10)
	}
	req.Header.Set("Range", rng)
	if validator != "" {
		req.Header.Set("If-Range", validator)
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "llmgw")
	if d.token != "" && req.URL.Host == d.rem.hubHost {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	b := &body{cancel: cancel, idle: d.f.idleTimeout()}
	// The timer covers the wait for headers too, so a custom Client without
	// ResponseHeaderTimeout still cannot hang on a silent server.
	b.timer = time.AfterFunc(b.idle, func() { b.idled.Store(true); cancel() })
	resp, err := d.f.client().Do(req)
	if err != nil {
		b.timer.Stop()
		cancel()
		if b.idled.Load() && ctx.Err() == nil {
			return nil, errIdle(b.idle)
		}
		return nil, err
	}
	b.resp = resp
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		se := &statusError{code: resp.StatusCode, status: resp.Status, hint: hintFor(d.rem, resp.StatusCode)}
		if d.rem.url != d.rem.source {
			se.url = d.rem.url // what hf: resolved to, worth seeing
		}
		if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			b.Close()
			return nil, fmt.Errorf("%w: %v", errRestart, se)
		}
		se.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		b.Close()
		return nil, se
	}
	return b, nil
}

// retryable reports whether asking again might work: the network, a server
// error, a rate limit, a stalled connection. A 404, a redirect loop or a bad
// certificate will answer the same way every time.
func retryable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code >= 500 || se.code == http.StatusTooManyRequests || se.code == http.StatusRequestTimeout
	}
	var idle errIdle
	if errors.As(err, &idle) {
		return true
	}
	// *url.Error is itself a net.Error, whatever it wraps (a redirect loop
	// included), so judge what it wraps.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// sleep waits before retry number n: after if the server said (Retry-After),
// else RetryWait doubling per retry, capped.
func (d *download) sleep(ctx context.Context, n int, after time.Duration, cause error) error {
	wait := after
	if wait <= 0 {
		wait = d.f.retryWait() << min(n-1, 16)
		wait = min(wait, maxRetryWait)
	}
	d.log.WithError(cause).WithFields(logrus.Fields{"retry": n, "wait": wait}).Warn("retrying")
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date; 0 if absent.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// copyAt writes the body to fh from off until its end, or until limit bytes
// when limit >= 0, calling wrote (if not nil) with the end of each write, in
// large writes (a pwrite per network read would be tens of
// thousands of syscalls a second). It returns the bytes written; a body that
// ends before limit is io.ErrUnexpectedEOF.
func (d *download) copyAt(fh *os.File, b *body, off, limit int64, wrote func(end int64)) (int64, error) {
	buf := make([]byte, 1<<20)
	var written int64
	for {
		want := int64(len(buf))
		if limit >= 0 {
			want = min(want, limit-written)
			if want == 0 {
				return written, nil
			}
		}
		n, rerr := fill(b, buf[:want])
		if n > 0 {
			if _, err := fh.WriteAt(buf[:n], off+written); err != nil {
				return written, &writeError{err}
			}
			written += int64(n)
			d.done.Add(int64(n))
			if wrote != nil {
				wrote(off + written)
			}
		}
		if rerr == io.EOF {
			if limit >= 0 && written < limit {
				return written, io.ErrUnexpectedEOF
			}
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

// writeBehindStep is how many bytes a stream writes before asking the kernel
// to start writing them out.
const writeBehindStep = 16 << 20

// writeBehind starts the disk writing a stream's bytes while later ones are
// still arriving. The file is fsynced before its rename; without this the
// kernel would hold the whole file in the page cache until then (a gigabyte
// is under the dirty thresholds) and the fsync would start the disk only
// after the network had finished, one after the other instead of together.
type writeBehind struct {
	fd   int
	from int64
}

func (w *writeBehind) wrote(end int64) {
	if end-w.from < writeBehindStep {
		return
	}
	startWriteOut(w.fd, w.from, end-w.from)
	w.from = end
}

// fill reads into buf until it is full or the reader fails. Unlike
// io.ReadFull it returns io.EOF itself, so a clean end stays apart from the
// io.ErrUnexpectedEOF Go's client gives for a body cut short of its length.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// reportProgress calls OnProgress every ProgressInterval from one goroutine,
// and once more when stopped.
func (d *download) reportProgress() (stop func()) {
	if d.f.OnProgress == nil {
		return func() {}
	}
	report := func() {
		d.f.OnProgress(Progress{Source: d.rem.source, Done: d.done.Load(), Total: d.total.Load()})
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d.f.progressInterval())
		defer t.Stop()
		for {
			select {
			case <-quit:
				report()
				return
			case <-t.C:
				report()
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// redactURL is u without what may be a credential: the user info, the query
// (where presigned URLs carry their signature) and the fragment.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.User, p.RawQuery, p.Fragment = nil, "", ""
	return p.String()
}
