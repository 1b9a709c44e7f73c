package fetch

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeOrigin is a real HTTP server on 127.0.0.1 serving one file, with the
// misbehaviours a fetcher meets in the field switchable per test. It records
// every request and counts TCP connections.
type fakeOrigin struct {
	t   *testing.T
	srv *httptest.Server

	mu   sync.Mutex
	data []byte
	etag string // "" serves no ETag
	mod  time.Time
	reqs []originReq

	// Behaviour; set before the requests it should affect.
	ignoreRange   bool          // answer every request 200 with the whole file
	ignoreIfRange bool          // honour Range but never If-Range
	noLength      bool          // 200, chunked, no Content-Length, no validators
	cutAfter      int64         // close the connection after this many body bytes...
	cuts          int           // ...for this many responses (negative: all)
	stallAt       int64         // when > 0, stop sending at this file offset...
	stalls        int           // ...for this many responses (negative: all)
	writeDelay    time.Duration // pause per 32 KiB written, to make fetches overlap
	status        []int         // answer these statuses first, in order
	retryAfter    string        // Retry-After sent with 429/503
	override      http.HandlerFunc
	hub           bool   // act as the hub: /org/repo/resolve/REV/FILE redirects to the file
	linkedEtag    string // the digest the hub publishes in X-Linked-Etag
	repoCommit    string // the commit the hub names in X-Repo-Commit
	redirectTo    string // the hub redirects to this base URL instead of its own
	// smallSendBuf gives each new connection a 64 KiB send buffer, so that
	// "served" counts little that is still in the kernel, not yet received.
	smallSendBuf bool

	conns   atomic.Int32
	served  atomic.Int64 // body bytes written
	aborted atomic.Int32 // requests whose client went away
	release chan struct{}
}

type originReq struct {
	Range, IfRange, Auth string
	URI, AcceptEncoding  string // as sent: the path still escaped
	Status               int
}

func newFakeOrigin(t *testing.T, size int) *fakeOrigin {
	t.Helper()
	o := &fakeOrigin{t: t, release: make(chan struct{})}
	o.setData(randomBytes(t, size), `"v1"`)
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(o.serve))
	o.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
			o.mu.Lock()
			small := o.smallSendBuf
			o.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok && small {
				tc.SetWriteBuffer(64 << 10)
			}
		}
	}
	o.srv.Start()
	t.Cleanup(func() {
		close(o.release)
		o.srv.CloseClientConnections()
		o.srv.Close()
	})
	return o
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// setData publishes a new version of the file.
func (o *fakeOrigin) setData(b []byte, etag string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.data, o.etag = b, etag
	o.mod = time.Now().Add(-time.Hour).Truncate(time.Second)
}

func (o *fakeOrigin) url() string { return o.srv.URL + "/model.gguf" }

func (o *fakeOrigin) requests() []originReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]originReq(nil), o.reqs...)
}

func (o *fakeOrigin) set(f func(o *fakeOrigin)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

func (o *fakeOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	data, etag, mod := o.data, o.etag, o.mod
	rec := originReq{Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range"), Auth: r.Header.Get("Authorization"),
		URI: r.RequestURI, AcceptEncoding: r.Header.Get("Accept-Encoding")}
	status := 0
	if len(o.status) > 0 {
		status, o.status = o.status[0], o.status[1:]
	}
	cut := int64(-1)
	if o.cutAfter > 0 && o.cuts != 0 {
		cut = o.cutAfter
		o.cuts--
	}
	stallAt := int64(-1)
	if o.stallAt > 0 && o.stalls != 0 {
		stallAt = o.stallAt
	}
	ignoreRange, ignoreIfRange, noLength, override := o.ignoreRange, o.ignoreIfRange, o.noLength, o.override
	retryAfter, delay := o.retryAfter, o.writeDelay
	hub, linkedEtag, redirectTo, repoCommit := o.hub, o.linkedEtag, o.redirectTo, o.repoCommit
	idx := len(o.reqs)
	o.reqs = append(o.reqs, rec)
	o.mu.Unlock()
	setStatus := func(code int) {
		o.mu.Lock()
		o.reqs[idx].Status = code
		o.mu.Unlock()
	}
	defer func() {
		if r.Context().Err() != nil {
			o.aborted.Add(1)
		}
	}()

	if override != nil {
		override(w, r)
		return
	}
	if status != 0 {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		setStatus(status)
		http.Error(w, http.StatusText(status), status)
		return
	}
	if hub && strings.Contains(r.URL.Path, "/resolve/") {
		// As huggingface.co answers for an LFS file: a redirect to the
		// storage backend, carrying the file's sha256.
		if linkedEtag != "" {
			w.Header().Set("X-Linked-Etag", `"`+linkedEtag+`"`)
		}
		if repoCommit != "" {
			w.Header().Set("X-Repo-Commit", repoCommit)
		}
		setStatus(http.StatusFound)
		http.Redirect(w, r, redirectTo+"/cdn/model.gguf", http.StatusFound)
		return
	}
	if r.URL.Path != "/model.gguf" && r.URL.Path != "/cdn/model.gguf" {
		setStatus(404)
		http.NotFound(w, r)
		return
	}

	// start is the file offset the body begins at, for stalls.
	start := int64(0)
	if !ignoreRange && !noLength {
		if s, ok := rangeStart(r.Header.Get("Range")); ok {
			start = s
		}
	}
	bw := &originWriter{ResponseWriter: w, o: o, r: r, cut: cut, stallAt: stallAt - start, delay: delay}
	if stallAt >= 0 && stallAt < start {
		bw.stallAt = -1
	}
	switch {
	case noLength:
		setStatus(200)
		w.WriteHeader(200)
		for off := 0; off < len(data); off += 32 << 10 {
			if _, err := bw.Write(data[off:min(off+32<<10, len(data))]); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
		}
	case ignoreRange:
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		setStatus(200)
		w.WriteHeader(200)
		bw.Write(data)
	default:
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		if ignoreIfRange {
			r.Header.Del("If-Range")
		}
		rec := &statusRecorder{ResponseWriter: bw}
		http.ServeContent(rec, r, "model.gguf", mod, bytes.NewReader(data))
		setStatus(rec.code)
	}
}

func rangeStart(h string) (int64, bool) {
	var s int64
	if _, err := fmt.Sscanf(h, "bytes=%d-", &s); err != nil {
		return 0, false
	}
	return s, true
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = 200
	}
	return s.ResponseWriter.Write(b)
}

// originWriter writes a body slowly, cut short, or stalled, as configured.
type originWriter struct {
	http.ResponseWriter
	o       *fakeOrigin
	r       *http.Request
	n       int64
	cut     int64 // < 0: never
	stallAt int64 // body offset; < 0: never
	delay   time.Duration
}

func (w *originWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		piece := b[:min(len(b), 32<<10)]
		if w.cut >= 0 && w.n+int64(len(piece)) > w.cut {
			piece = piece[:w.cut-w.n]
			m, _ := w.ResponseWriter.Write(piece)
			w.o.served.Add(int64(m))
			rc := http.NewResponseController(w.ResponseWriter)
			rc.Flush()
			if conn, _, err := rc.Hijack(); err == nil {
				conn.Close()
			}
			return written + m, io.ErrClosedPipe
		}
		if w.stallAt >= 0 && w.n+int64(len(piece)) > w.stallAt {
			piece = piece[:w.stallAt-w.n]
			m, _ := w.ResponseWriter.Write(piece)
			w.o.served.Add(int64(m))
			http.NewResponseController(w.ResponseWriter).Flush()
			select {
			case <-w.r.Context().Done():
			case <-w.o.release:
			}
			return written + m, io.ErrClosedPipe
		}
		if w.delay > 0 {
			time.Sleep(w.delay)
		}
		m, err := w.ResponseWriter.Write(piece)
		w.n += int64(m)
		w.o.served.Add(int64(m))
		written += m
		if err != nil {
			return written, err
		}
		b = b[len(piece):]
	}
	return written, nil
}

// testFetcher is a Fetcher with everything in t.TempDir and the timeouts
// short enough for unit tests.
func testFetcher(t *testing.T) *Fetcher {
	t.Helper()
	dir := t.TempDir()
	return &Fetcher{
		CacheDir:    dir + "/cache",
		LockDir:     dir + "/locks",
		IdleTimeout: 2 * time.Second,
		RetryWait:   10 * time.Millisecond,
		Retries:     2,
		HFEndpoint:  "http://127.0.0.1:1", // never the real hub
	}
}

func mustEnsure(t *testing.T, f *Fetcher, source string, want Want) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.Ensure(ctx, source, want)
	if err != nil {
		t.Fatalf("Ensure(%q) = %v", source, err)
	}
	return p
}

func assertFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, sha256 %s; want %d bytes, sha256 %s", path, len(got), sha256Hex(got)[:12], len(want), sha256Hex(want)[:12])
	}
}

func assertAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists; a failed fetch must leave nothing under the real name", path)
	}
}

// heldOrigin serves the whole file (200, with its length and ETag), holding
// it after the first at bytes until release is closed or the client goes
// away: a fetch that is under way for exactly as long as the test needs.
func heldOrigin(o *fakeOrigin, at int, release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		data := o.data
		o.mu.Unlock()
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(200)
		m, _ := w.Write(data[:at])
		o.served.Add(int64(m))
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		m, _ = w.Write(data[at:])
		o.served.Add(int64(m))
	}
}
