package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
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
	// fh is the .part, open and flocked for the whole download (see
	// Fetcher.lockPart): every write, truncation, hash and the rename act on
	// this one inode.
	fh     *os.File
	token  string
	hubSum string // the digest the hub published, if any
	// single is set once the origin was found to ignore bounded ranges:
	// the rest of this download is one stream (errNoRanges).
	single bool
	origin string // how the origin named the version served (originOf)

	// hc, when set, makes the requests instead of the Fetcher's
	// (an Origin's caller's; rangeorigin.go).
	hc *http.Client

	done  atomic.Int64 // bytes on disk, for progress
	total atomic.Int64 // -1 until known
}

// errRestart means the bytes on disk cannot be continued: the remote changed
// (If-Range failed, or a server that ignores If-Range answered with another
// validator or size), or a range came back other than asked. The only safe
// thing is to throw them away and start over; splicing two versions of a file
// is what curl -C -, wget -c and aria2c -c were measured doing.
var errRestart = errors.New("the remote changed since the partial download started")

// rangeIgnored is a resume answered with the whole file of the same
// version: the origin ignores Range. The bytes on disk are sound but
// cannot be continued, so it restarts like errRestart; said as what it is,
// not as a remote that changed.
type rangeIgnored struct {
	from   int64
	status string
}

func (e *rangeIgnored) Error() string {
	return fmt.Sprintf("the origin ignores Range requests: a resume from byte %d was answered %s with the whole file, of the same version; "+
		"each interruption starts the file over (an origin or proxy that serves Range, or one that does not drop the connection, fixes it)", e.from, e.status)
}

func (e *rangeIgnored) Is(target error) bool { return target == errRestart }

// errNoRanges means the origin answered a bounded range request with the
// whole file, or with other bytes, of the same version: it serves "bytes=N-"
// (so the first request looked fine) but not "bytes=N-M". Such proxies
// exist. Nothing on disk is wrong, so nothing is thrown away: the fetch goes
// on as one stream from the end of its contiguous bytes (toStream).
var errNoRanges = errors.New("the origin does not serve bounded ranges")

func (d *download) run(ctx context.Context) (string, error) {
	d.part = d.target + catalog.PartSuffix
	d.statePath = d.target + catalog.RangesSuffix
	d.total.Store(-1)
	if d.rem.hf {
		tok, err := d.f.hfToken()
		if err != nil {
			return "", &Error{Source: d.rem.source, Op: "token", Err: err}
		}
		d.token = tok
	}
	d.log.WithField("url", redactURL(d.rem.url)).Log(levelOf(d.rem), "fetch started")
	start := time.Now()

	stop := d.reportProgress()
	defer stop()

	for restarts := 0; ; restarts++ {
		sum, err := d.attempt(ctx)
		if errors.Is(err, errNoRanges) && !d.single && ctx.Err() == nil {
			d.log.WithError(err).Warn("fetching with one connection from here on; set connections = 1 in agent.toml for an origin like this one")
			d.single = true
			if err := d.toStream(); err != nil {
				return "", &Error{Source: d.rem.source, Op: "write", Err: err}
			}
			continue
		}
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
			d.log.WithError(err).Log(levelOf(d.rem), "fetch failed")
			return "", err
		}
		d.log.WithFields(logrus.Fields{"path": d.target, "bytes": d.done.Load(), "took": time.Since(start).Round(time.Millisecond)}).Log(levelOf(d.rem), "fetch finished")
		return sum, nil
	}
}

// discard throws away the partial download and its state. The .part is
// emptied through the locked descriptor rather than unlinked, so the lock
// stays on the file this process goes on writing.
func (d *download) discard() {
	os.Remove(d.statePath)
	d.fh.Truncate(0)
	d.done.Store(0)
}

// giveBack removes the .part of a fetch that ran out of space, and returns
// err saying so. A fetch that cannot finish must not keep the disk full:
// every other writer on the node, jobs and logs included, fails until the
// space comes back, and waiting for an operator to free room for a resume
// is worse than fetching those bytes again. Other errors pass through.
func (d *download) giveBack(err error) error {
	if !isNoSpace(err) {
		return err
	}
	d.fh.Truncate(0)
	if sameFile(d.fh, d.part) {
		os.Remove(d.part)
	}
	os.Remove(d.statePath)
	d.done.Store(0)
	return fmt.Errorf("%w; the partial download was removed to give the space back", err)
}

// dropEmptyPart removes a .part that holds nothing, after a fetch that
// failed: an empty file is no progress to resume from. It holds the .part's
// flock, and removes the name only while it still points at the inode this
// process has open.
func (d *download) dropEmptyPart() {
	if fi, err := d.fh.Stat(); err == nil && fi.Size() == 0 && sameFile(d.fh, d.part) {
		os.Remove(d.part)
		os.Remove(d.statePath)
	}
}

// attempt fetches from whatever is on disk to a verified, renamed file.
func (d *download) attempt(ctx context.Context) (string, error) {
	st := loadState(d.statePath, d.rem.source)
	partSize := int64(-1)
	if fi, err := d.fh.Stat(); err == nil {
		partSize = fi.Size()
	}
	if st == nil || partSize < 0 || (!st.Parallel && partSize > st.Size && st.Size >= 0) ||
		(st.Parallel && partSize != st.Size) {
		// Bytes of unknown provenance: without a validator there is no way
		// to ask the origin whether they are still the file's. A parallel
		// .part is preallocated to its size before its record is first
		// saved, so one of another length is not the .part the record
		// describes (it was removed, or emptied by giveBack, and created
		// anew): its "finished" ranges would be zeros.
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
		d.origin = st.Origin
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
	d.origin = fresh.Origin

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
// it can be resumed and checked range by range (a validator), when it is
// large enough to be worth it, and unless the origin was found to ignore
// bounded ranges.
func (d *download) parallel(st *rangeState) bool {
	return !d.single && d.f.connections() > 1 && st.validator() != "" && st.Size >= d.f.parallelMin()
}

// toStream turns a parallel .part into a stream's: it keeps the bytes done
// from the start without a gap and drops the rest, which a stream cannot
// skip over. A parallel fetch whose other ranges were refused holds little
// beyond its first range anyway.
func (d *download) toStream() error {
	st := loadState(d.statePath, d.rem.source)
	if st == nil || !st.Parallel {
		return nil
	}
	var prefix int64
	for _, r := range st.Done {
		if r[0] > prefix {
			break
		}
		prefix = max(prefix, r[1])
	}
	if err := d.fh.Truncate(prefix); err != nil {
		return err
	}
	st.Parallel, st.Done = false, nil
	d.done.Store(prefix)
	return st.save(d.statePath)
}

// checkHub compares the digest the hub publishes with the caller's, and
// the commit it served with the one asked for.
func (d *download) checkHub(resp *http.Response) error {
	if c := hubCommit(resp); d.want.Commit != "" && c != "" && c != d.want.Commit {
		return &Error{Source: d.rem.source, Op: "verify", Err: fmt.Errorf(
			"the hub served commit %s, not %s that the model is pinned to (is HF_ENDPOINT a mirror that serves another revision?)", c, d.want.Commit)}
	}
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

// seal ends a download whose bytes are all in the .part: it takes the
// digest the hashing goroutine computed (when one ran) and hands the .part
// to finish for verification and the rename.
func (d *download) seal(ctx context.Context, hashed <-chan hashResult, size int64) (string, error) {
	sum := ""
	if hashed != nil {
		h := <-hashed
		if h.err != nil {
			return "", &Error{Source: d.rem.source, Op: "verify", Err: h.err}
		}
		sum = h.sum
	}
	return d.finish(ctx, size, sum)
}

// checkRange accepts a resumed response only if it is a 206 for exactly the
// bytes asked, of the version on disk. to < 0 means "to the end".
func (d *download) checkRange(resp *http.Response, st *rangeState, from, to int64) error {
	if to >= 0 && ignoredRange(resp, st, from, to) {
		return fmt.Errorf("%w: asked for bytes %d-%d, got %s with Content-Range %q", errNoRanges, from, to, resp.Status, resp.Header.Get("Content-Range"))
	}
	if to < 0 && resp.StatusCode == http.StatusOK && ignoredRange(resp, st, from, st.Size-1) {
		// The same version, whole: not a remote that changed, an origin
		// that does not serve ranges at all.
		return &rangeIgnored{from: from, status: resp.Status}
	}
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

// ignoredRange reports whether resp, the answer to a bounded range request,
// is the version on disk but not the range asked: the whole file (200 of
// the file's size), or a 206 of other bytes of it. A changed validator or
// size is a changed remote instead, which checkRange reports as such.
func ignoredRange(resp *http.Response, st *rangeState, from, to int64) bool {
	if v := newState(st.Source, resp).validator(); v != "" && v != st.validator() {
		return false
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.ContentLength == st.Size
	case http.StatusPartialContent:
		cr, err := parseContentRange(resp.Header.Get("Content-Range"))
		return err == nil && cr.size == st.Size && (cr.start != from || cr.end != to)
	}
	return false
}

// finish checks the complete .part and renames it into place. sum is the
// digest computed while streaming, or "".
//
// Everything acts on the open, locked descriptor: its size, its hash, its
// fsync and its tag; and the rename happens only while the .part's name
// still points at that inode, so what is renamed is what was verified.
func (d *download) finish(ctx context.Context, size int64, sum string) (string, error) {
	fail := func(op string, err error) (string, error) {
		return "", &Error{Source: d.rem.source, Op: op, Err: err}
	}
	fi, err := d.fh.Stat()
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
	if d.want.GitBlob != "" {
		id, err := gitBlobFD(ctx, d.fh, fi.Size())
		if err != nil {
			return fail("verify", err)
		}
		if id != d.want.GitBlob {
			d.discard()
			return fail("verify", fmt.Errorf("git blob id mismatch: expected %s, got %s; discarded", d.want.GitBlob, id))
		}
	}
	if exp := d.expectedSum(); exp != "" {
		if sum == "" {
			if sum, err = hashFD(ctx, d.fh); err != nil {
				return fail("verify", err)
			}
		}
		if sum != exp {
			d.discard()
			return fail("verify", fmt.Errorf("sha256 mismatch: expected %s, got %s; discarded", exp, sum))
		}
	}
	if err := d.fh.Sync(); err != nil {
		return fail("sync", err)
	}
	if sum != "" {
		recordSum(d.fh, sum)
	}
	if d.origin != "" {
		recordOrigin(d.fh, d.origin)
	}
	if !sameFile(d.fh, d.part) {
		return fail("rename", fmt.Errorf("%s is no longer the file this fetch wrote and verified; not renaming it", d.part))
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
