package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// stateSaveInterval is how often a parallel fetch records its finished
// chunks. Each save first fsyncs the .part, so the state never claims bytes
// a crash could lose; once a second keeps that flush small.
const stateSaveInterval = time.Second

// span is the bytes [start, end) of a file.
type span struct{ start, end int64 }

// rangeState is the .part.ranges file: which version of the remote the .part
// holds and, for a parallel fetch, which of its bytes are done. It is written
// atomically (temporary file, fsync, rename) before any byte it describes,
// so the .part never holds bytes of unknown provenance.
type rangeState struct {
	Source       string `json:"source"`
	Size         int64  `json:"size"` // -1 when the origin gave none
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Origin is how the origin named the version it served (originOf),
	// kept so that a fetch finished from a resumed .part still records it.
	Origin string `json:"origin,omitempty"`
	// Parallel .part files are preallocated to Size, so their length says
	// nothing; Done does. A stream's .part is done up to its length.
	Parallel bool       `json:"parallel"`
	Done     [][2]int64 `json:"done,omitempty"`
}

// newState reads the validator from a response. A weak ETag is not used:
// If-Range requires a strong one, since a weak one may name bytes that
// differ.
func newState(source string, resp *http.Response) *rangeState {
	st := &rangeState{Source: source, Size: -1, Origin: originOf(resp)}
	if et := resp.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
		st.ETag = et
	} else {
		st.LastModified = resp.Header.Get("Last-Modified")
	}
	return st
}

// validator is what If-Range carries: the strong ETag, else Last-Modified.
func (s *rangeState) validator() string {
	if s.ETag != "" {
		return s.ETag
	}
	return s.LastModified
}

// add records [start, end) as done, merging neighbours.
func (s *rangeState) add(sp span) {
	spans := []span{sp}
	for _, d := range s.Done {
		spans = append(spans, span{d[0], d[1]})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.start - b.start) })
	merged := spans[:1]
	for _, x := range spans[1:] {
		last := &merged[len(merged)-1]
		if x.start <= last.end {
			last.end = max(last.end, x.end)
		} else {
			merged = append(merged, x)
		}
	}
	s.Done = s.Done[:0]
	for _, m := range merged {
		s.Done = append(s.Done, [2]int64{m.start, m.end})
	}
}

// missing is what is not done yet, in order.
func (s *rangeState) missing() []span {
	var gaps []span
	at := int64(0)
	for _, d := range s.Done {
		if d[0] > at {
			gaps = append(gaps, span{at, d[0]})
		}
		at = max(at, d[1])
	}
	if at < s.Size {
		gaps = append(gaps, span{at, s.Size})
	}
	return gaps
}

func (s *rangeState) doneBytes() int64 {
	var n int64
	for _, d := range s.Done {
		n += d[1] - d[0]
	}
	return n
}

// save writes the state atomically: a temporary file, fsynced, renamed over
// path.
//
// It is not catalog.WriteAtomic, on purpose. The record is rewritten every
// second by the one process that holds the node's lock for this file, so
// its temporary file can have a fixed name, catalog.RangesTmpSuffix, which
// the scanner and gc know: a crash leaves that one file, which the next
// save reuses, rather than a randomly named one that nobody removes. Nor
// does it sync the directory: the record only ever claims bytes already
// fsynced, so a rename lost in a crash resumes from an older record, which
// is safe.
func (s *rangeState) save(path string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := strings.TrimSuffix(path, catalog.RangesSuffix) + catalog.RangesTmpSuffix
	fh, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = fh.Write(b)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// loadState reads a state file, or returns nil when there is none or it
// cannot be trusted (another source, nonsense ranges): the .part is then
// thrown away rather than guessed at.
func loadState(path, source string) *rangeState {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var s rangeState
	if json.Unmarshal(b, &s) != nil || s.Source != source || s.validator() == "" || s.Size < -1 {
		return nil
	}
	if s.Parallel && s.Size < 0 {
		return nil
	}
	for _, d := range s.Done {
		if d[0] < 0 || d[1] <= d[0] || d[1] > s.Size {
			return nil
		}
	}
	return &s
}

// contentRange is a parsed "bytes START-END/SIZE"; size is -1 for "*".
type contentRange struct{ start, end, size int64 }

func parseContentRange(v string) (contentRange, error) {
	bad := fmt.Errorf("unusable Content-Range %q", v)
	rest, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return contentRange{}, bad
	}
	rng, size, ok := strings.Cut(rest, "/")
	if !ok {
		return contentRange{}, bad
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return contentRange{}, bad
	}
	var cr contentRange
	var err1, err2, err3 error
	cr.start, err1 = strconv.ParseInt(a, 10, 64)
	cr.end, err2 = strconv.ParseInt(b, 10, 64)
	if size == "*" {
		cr.size = -1
	} else {
		cr.size, err3 = strconv.ParseInt(size, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || cr.start < 0 || cr.end < cr.start {
		return contentRange{}, bad
	}
	return cr, nil
}

// chunkSize is the size of the ranges handed to connections: ChunkSize, or
// the file split four ways per connection, so that a slow connection at the
// end holds up at most a quarter of its share, within 16 MiB to 1 GiB.
func (d *download) chunkSize(size int64) int64 {
	if d.f.ChunkSize > 0 {
		return d.f.ChunkSize
	}
	cs := size / int64(d.f.connections()*4)
	return min(max(cs, 16<<20), 1<<30)
}

// parallelFetch fills the missing chunks of a preallocated .part over
// Connections connections. first is the open response for the first missing
// chunk, starting at from.
//
// Each chunk is its own range request carrying If-Range, and its 206 must
// name exactly the chunk and the size on record; anything else means the
// remote changed and the whole fetch starts over, never splices. Finished
// chunks are recorded in the state file, so a killed fetch resumes without
// asking for them again.
func (d *download) parallelFetch(ctx context.Context, st *rangeState, first *body, from int64) (string, error) {
	dir := filepath.Dir(d.part)
	fail := func(op string, err error) (string, error) {
		first.Close()
		return "", &Error{Source: d.rem.source, Op: op, Err: err}
	}
	fresh := len(st.Done) == 0
	fh := d.fh
	if fresh {
		if err := fh.Truncate(0); err != nil {
			return fail("write", err)
		}
	}
	release, err := d.claimSpace(ctx, st.Size-allocated(fh), st.Size)
	if err != nil {
		return fail("get", err)
	}
	defer release()
	if err := preallocate(fh, st.Size); err != nil {
		return fail("write", d.giveBack(noSpace(err, dir, st.Size)))
	}
	st.Parallel = true
	if err := st.save(d.statePath); err != nil {
		return fail("write", err)
	}
	d.done.Store(st.doneBytes())

	var chunks []span
	cs := d.chunkSize(st.Size)
	for _, g := range st.missing() {
		for s := g.start; s < g.end; s += cs {
			chunks = append(chunks, span{s, min(s+cs, g.end)})
		}
	}
	if len(chunks) == 0 || chunks[0].start != from {
		return fail("get", fmt.Errorf("internal: first chunk does not start at %d", from))
	}
	q := &workQueue{items: chunks[1:], slow: map[int64]int{}}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	poke := make(chan struct{}, 1)    // bytes landed: the hash frontier may move
	saveNow := make(chan struct{}, 1) // enough unsaved progress to record
	saveEvery := saveStep(st.Size)
	var (
		mu       sync.Mutex
		dirty    bool
		unsaved  int64
		firstErr error
		wg       sync.WaitGroup
	)
	setErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	save := func() error {
		mu.Lock()
		if !dirty {
			mu.Unlock()
			return nil
		}
		dirty, unsaved = false, 0
		// The record is taken before the sync, so it claims only bytes
		// whose writes the sync below makes durable: bytes written between
		// the two wait for the next save.
		snap := *st
		snap.Done = slices.Clone(st.Done)
		mu.Unlock()
		// Data first, then the record that claims it.
		if err := fh.Sync(); err != nil {
			return err
		}
		return snap.save(d.statePath)
	}
	// record notes bytes [from, end) as written: progress within a chunk,
	// not only whole chunks, so a kill loses at most the bytes since the
	// last save (saveStep) instead of every connection's chunk.
	record := func(from, end int64) {
		mu.Lock()
		st.add(span{from, end})
		dirty = true
		unsaved += end - from
		full := unsaved >= saveEvery
		mu.Unlock()
		select {
		case poke <- struct{}{}:
		default:
		}
		if full {
			select {
			case saveNow <- struct{}{}:
			default:
			}
		}
	}
	worker := func(b *body, c span) {
		defer wg.Done()
		for {
			off, err := d.fetchChunk(wctx, fh, st, c, b, record)
			b = nil
			var slow errSlow
			switch {
			case errors.As(err, &slow):
				// A trickle is not a connection: its range goes back to the
				// queue, for whichever connection is free next, on a new
				// TCP connection. A range no connection can fetch faster
				// than the minimum fails the fetch, as aria2's
				// --lowest-speed-limit does.
				if q.dropped(c.end) > d.f.retries() {
					setErr(fmt.Errorf("bytes %d-%d: every connection for them fell below the minimum speed: %w", off, c.end-1, err))
					return
				}
				d.log.WithError(err).WithField("range", fmt.Sprintf("%d-%d", off, c.end-1)).Warn("dropping a slow connection; its range goes to another")
				q.push(span{off, c.end})
			case err != nil:
				setErr(err)
				return
			}
			var ok bool
			if c, ok = q.pop(); !ok || wctx.Err() != nil {
				return
			}
		}
	}
	// Hash behind the download: the bytes from 0 up to the first unfinished
	// chunk are final, so they can be read back from the page cache while
	// later chunks still arrive, instead of in a second pass over the whole
	// file after the last byte. Even with no digest to check: the caller
	// then reports the digest for the cluster to pin (see Digest).
	hashed := make(chan hashResult, 1)
	frontier := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(st.Done) > 0 && st.Done[0][0] == 0 {
			return st.Done[0][1], st.Done[0][1] == st.Size
		}
		return 0, st.Size == 0
	}
	go func() {
		sum, err := hashBehind(wctx, fh, frontier, poke)
		hashed <- hashResult{sum, err}
	}()

	n := min(d.f.connections(), len(chunks))
	wg.Add(n)
	go worker(first, chunks[0])
	for range n - 1 {
		c, ok := q.pop()
		if !ok {
			wg.Done()
			continue
		}
		go worker(nil, c)
	}

	saverDone := make(chan struct{})
	stopSaver := make(chan struct{})
	go func() {
		defer close(saverDone)
		t := time.NewTicker(stateSaveInterval)
		defer t.Stop()
		for {
			select {
			case <-stopSaver:
				return
			case <-saveNow:
				if err := save(); err != nil {
					setErr(&writeError{err})
				}
			case <-t.C:
				if err := save(); err != nil {
					setErr(&writeError{err})
				}
			}
		}
	}()
	wg.Wait()
	close(stopSaver)
	<-saverDone
	// Record what finished even when the fetch failed: that is what the
	// next attempt resumes from.
	if err := save(); err != nil && firstErr == nil {
		firstErr = &writeError{err}
	}
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		var we *writeError
		if errors.As(firstErr, &we) {
			return "", &Error{Source: d.rem.source, Op: "write", Err: d.giveBack(noSpace(we.err, dir, st.Size-st.doneBytes()))}
		}
		return "", firstErr
	}
	if gaps := st.missing(); len(gaps) > 0 {
		return "", fmt.Errorf("internal: %d ranges still missing", len(gaps))
	}
	return d.seal(ctx, hashed, st.Size)
}

// fetchChunk fetches the bytes of c into fh at their offsets, resuming within
// the chunk after a network error, calling record for every write. b, if
// not nil, is an open response positioned at c.start (it may run past
// c.end; the rest is not read). It returns how far it got; a connection
// dropped for being slow is errSlow, not retried here: its range is the
// caller's to hand to another.
func (d *download) fetchChunk(ctx context.Context, fh *os.File, st *rangeState, c span, b *body, record func(from, end int64)) (int64, error) {
	off := c.start
	wrote := func(end int64) error {
		record(off, end)
		off = end
		return nil
	}
	for retry := 0; ; {
		if b == nil {
			var err error
			if b, err = d.open(ctx, off, c.end-1, st.validator()); err != nil {
				return off, err
			}
			if err := d.checkRange(b.resp, st, off, c.end-1); err != nil {
				b.Close()
				return off, err
			}
		}
		from := off
		_, err := d.copyAt(fh, b, off, c.end-off, wrote)
		b.Close()
		b = nil
		if err == nil {
			return off, nil
		}
		if ctx.Err() != nil {
			return off, ctx.Err()
		}
		var we *writeError
		var slow errSlow
		if errors.As(err, &we) || errors.As(err, &slow) {
			return off, err
		}
		if off > from {
			retry = 0
		}
		if retry++; retry > d.f.retries() {
			return off, err
		}
		if err := d.sleep(ctx, retry, 0, err); err != nil {
			return off, err
		}
	}
}

// saveStep is how many bytes a parallel fetch writes before it records its
// progress (or a second passes): 0.5% of the file, between 1 MiB and
// 64 MiB. Each save is an fsync, so not every write; but often enough that
// a killed fetch asks again for at most a few MiB (issue: resumes kept only
// whole chunks and served 1.3-1.6× the file after one kill).
func saveStep(size int64) int64 {
	return min(max(size/200, 1<<20), 64<<20)
}

// workQueue is the ranges not yet handed to a connection. A range whose
// connection was dropped as slow comes back to it.
type workQueue struct {
	mu    sync.Mutex
	items []span
	slow  map[int64]int // drops per range, by the range's end
}

func (q *workQueue) pop() (span, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return span{}, false
	}
	c := q.items[0]
	q.items = q.items[1:]
	return c, true
}

func (q *workQueue) push(c span) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, c)
}

// dropped counts one more slow connection for the range ending at end.
func (q *workQueue) dropped(end int64) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.slow[end]++
	return q.slow[end]
}
