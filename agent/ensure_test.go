package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// origin serves one file slowly enough that concurrent ensures overlap, and
// counts the GETs it answers.
type origin struct {
	srv  *httptest.Server
	data []byte
	gets atomic.Int32
	// stallAfter, when > 0, sends that many bytes and then holds the
	// connection open until release is closed: a fetch killed mid-way.
	stallAfter int
	release    chan struct{}
	// holdAt, when > 0, sends that many bytes of a GET from 0 and then
	// waits for resume before sending the rest: a fetch that is under way
	// for exactly as long as a test needs.
	holdAt int
	resume chan struct{}
	ranges []string
	mu     sync.Mutex
}

func newOrigin(t *testing.T, size int) *origin {
	t.Helper()
	o := &origin{data: make([]byte, size), release: make(chan struct{}), resume: make(chan struct{})}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range o.data {
		o.data[i] = byte(rng.Uint32())
	}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			o.gets.Add(1)
		}
		o.mu.Lock()
		o.ranges = append(o.ranges, r.Header.Get("Range"))
		stall, hold := o.stallAfter, o.holdAt
		o.mu.Unlock()
		w.Header().Set("ETag", `"v1"`)
		if rg := r.Header.Get("Range"); hold > 0 && (rg == "" || strings.HasPrefix(rg, "bytes=0-")) {
			w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
			w.WriteHeader(http.StatusOK)
			w.Write(o.data[:hold])
			http.NewResponseController(w).Flush()
			select {
			case <-o.resume:
			case <-r.Context().Done():
				return
			}
			w.Write(o.data[hold:])
			return
		}
		if rg := r.Header.Get("Range"); stall > 0 && (rg == "" || strings.HasPrefix(rg, "bytes=0-")) {
			w.Header().Set("Accept-Ranges", "bytes")
			w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
			w.WriteHeader(http.StatusOK)
			w.Write(o.data[:stall])
			http.NewResponseController(w).Flush()
			select {
			case <-o.release:
			case <-r.Context().Done():
			}
			return
		}
		// Slow: 64 KiB every 15 ms, so a 1 MiB file takes ~250 ms and every
		// client has joined the fetch long before it ends.
		http.ServeContent(&slowWriter{ResponseWriter: w}, r, "model.gguf", time.Time{}, bytes.NewReader(o.data))
	}))
	t.Cleanup(func() {
		select {
		case <-o.release:
		default:
			close(o.release)
		}
		o.srv.Close()
	})
	return o
}

type slowWriter struct{ http.ResponseWriter }

func (s *slowWriter) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		k := min(len(p), 64<<10)
		m, err := s.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		http.NewResponseController(s.ResponseWriter).Flush()
		time.Sleep(15 * time.Millisecond)
		p = p[k:]
	}
	return n, nil
}

func TestEnsureSharedByConcurrentClients(t *testing.T) {
	o := newOrigin(t, 1<<20)
	o.holdAt = 512 << 10 // until every client has joined the fetch
	fc := newFakeCoord(t)
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.ReportInterval = time.Hour
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	fc.next(t, 5*time.Second, nil) // the first, empty report

	source := o.srv.URL + "/models/model.gguf"
	sum := sha256.Sum256(o.data)
	const clients = 6
	var wg sync.WaitGroup
	paths := make([]string, clients)
	errs := make([]error, clients)
	progress := make([][]api.Fetch, clients)
	for i := range clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			paths[i], errs[i] = lc.Ensure(ctx, api.EnsureRequest{Source: source, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(o.data))}, func(f api.Fetch) {
				progress[i] = append(progress[i], f)
			})
		})
	}
	waitUntil(t, "every client to wait on the one fetch", func() bool { return flightWaiters(a, source) == clients })
	close(o.resume)
	wg.Wait()

	want := catalog.CachePathFor(cfg.CacheDir, source)
	for i := range clients {
		if errs[i] != nil || paths[i] != want {
			t.Errorf("client %d: Ensure = %q, %v; want %q", i, paths[i], errs[i], want)
			continue
		}
		if len(progress[i]) == 0 {
			t.Errorf("client %d saw no progress", i)
			continue
		}
		lastP := progress[i][len(progress[i])-1]
		if lastP.Source != source || lastP.Done != int64(len(o.data)) || lastP.Total != int64(len(o.data)) || lastP.Started.IsZero() {
			t.Errorf("client %d: last progress %+v, want all %d bytes", i, lastP, len(o.data))
		}
	}
	if n := o.gets.Load(); n != 1 {
		t.Errorf("origin answered %d GETs for %d clients, want exactly 1", n, clients)
	}
	got, err := os.ReadFile(want)
	if err != nil || !bytes.Equal(got, o.data) {
		t.Fatalf("fetched file differs from the origin's (%v)", err)
	}
	if v := testutil.ToFloat64(a.metrics.fetchedBytes); v != float64(len(o.data)) {
		t.Errorf("fetched_bytes_total = %v, want %d", v, len(o.data))
	}
	// The fetch ending is reported at once, with the fetched file.
	r := fc.next(t, 5*time.Second, func(r api.Report) bool { return len(r.Weights) == 1 })
	if r.Weights[0].Path != want || len(r.Fetches) != 0 {
		t.Errorf("report after the fetch: weights %+v fetches %+v", r.Weights, r.Fetches)
	}

	// Present now: a second ensure answers from the cache, with no GET.
	p, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: source}, nil)
	if err != nil || p != want || o.gets.Load() != 1 {
		t.Errorf("second Ensure = %q, %v after %d GETs", p, err, o.gets.Load())
	}
}

func TestEnsureAnswers(t *testing.T) {
	cfg := testConfig(t)
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	file := filepath.Join(t.TempDir(), "m.gguf")
	writeFile(t, file, 10)

	for _, tc := range []struct {
		name, source, sha string
		wantPath          string
		wantCode          string
	}{
		{name: "path present", source: file, wantPath: file},
		{name: "path missing", source: file + ".nope", wantCode: api.CodeNotFound},
		{name: "model id passes through", source: "Qwen/Qwen2.5-7B-Instruct", wantPath: "Qwen/Qwen2.5-7B-Instruct"},
		{name: "empty source", source: " ", wantCode: api.CodeInvalid},
		{name: "bad digest", source: "https://example.invalid/x.gguf", sha: "abc", wantCode: api.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: tc.source, SHA256: tc.sha}, nil)
			var ae *api.Error
			switch {
			case tc.wantCode != "":
				if !errors.As(err, &ae) || ae.Code != tc.wantCode {
					t.Errorf("Ensure(%q) = %q, %v; want code %s", tc.source, p, err, tc.wantCode)
				}
			case err != nil || p != tc.wantPath:
				t.Errorf("Ensure(%q) = %q, %v; want %q", tc.source, p, err, tc.wantPath)
			}
		})
	}
}

func TestEnsureFetchErrorCountedOnce(t *testing.T) {
	// The 404 waits until the three ensures wait on one fetch.
	answer := make(chan struct{})
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-answer:
		case <-r.Context().Done():
		}
		http.NotFound(w, r)
	}))
	defer notFound.Close()
	cfg := testConfig(t)
	a := newTestAgent(t, cfg)
	lc, _ := start(t, a)
	source := notFound.URL + "/gone.gguf"
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			_, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: source}, nil)
			var ae *api.Error
			if !errors.As(err, &ae) || !strings.Contains(ae.Message, "404") {
				t.Errorf("Ensure of a 404 = %v, want an agent error naming the 404", err)
			}
		})
	}
	waitUntil(t, "the three ensures to wait on one fetch", func() bool { return flightWaiters(a, source) == 3 })
	close(answer)
	wg.Wait()
	if v := testutil.ToFloat64(a.metrics.fetchErrors); v != 1 {
		t.Errorf("fetch_errors_total = %v after one failed fetch with three waiters, want 1", v)
	}
	a.mu.Lock()
	recent := a.errs.strings(time.Now())
	a.mu.Unlock()
	if len(recent) != 1 || !strings.Contains(recent[0], "gone.gguf") {
		t.Errorf("recent errors = %q, want the failed fetch once", recent)
	}
}

// TestStopDuringFetchKeepsPart stops the agent (as SIGTERM does, by ending
// Run's context) while a fetch is half done: the bytes stay in the .part,
// nothing appears under the real name, and a new agent resumes from them.
func TestStopDuringFetchKeepsPart(t *testing.T) {
	// More than the fetcher's 1 MiB write buffer before the stall, so some
	// bytes are on disk when the agent stops.
	o := newOrigin(t, 3<<20)
	o.stallAfter = 3 << 19
	fc := newFakeCoord(t)
	cfg := testConfig(t)
	cfg.Coordinator = fc.srv.URL
	cfg.ReportInterval = time.Hour
	a := newTestAgent(t, cfg)
	lc, stop := start(t, a)

	source := o.srv.URL + "/m.gguf"
	target := catalog.CachePathFor(cfg.CacheDir, source)
	moving := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := lc.Ensure(context.Background(), api.EnsureRequest{Source: source}, func(f api.Fetch) {
			if f.Done > 0 {
				once.Do(func() { close(moving) })
			}
		})
		errc <- err
	}()
	select {
	case <-moving:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch never made progress")
	}
	if _, err := lc.Status(context.Background()); err != nil {
		t.Errorf("status during a fetch: %v", err)
	}
	// A fetch starting is reported at once, so the coordinator can show it.
	r := fc.next(t, 5*time.Second, func(r api.Report) bool { return len(r.Fetches) == 1 })
	if f := r.Fetches[0]; f.Source != source || f.Total != 3<<20 || f.Started.IsZero() {
		t.Errorf("reported fetch = %+v", f)
	}
	if f := a.fetchesNow(time.Now()); len(f) != 1 || f[0].Source != source || f[0].Done <= 0 || f[0].Total != 3<<20 {
		t.Errorf("fetches in progress = %+v", f)
	}

	if err := stop(); err != nil {
		t.Errorf("Run = %v, want a clean stop", err)
	}
	if err := <-errc; err == nil {
		t.Error("Ensure succeeded although the agent stopped mid-fetch")
	}
	// The fetch goroutine notices its context shortly after.
	var partSize int64
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, err := os.Stat(target + catalog.PartSuffix)
		if err == nil && fi.Size() > 0 {
			partSize = fi.Size()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no .part left after stopping mid-fetch: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file exists under the real name after an interrupted fetch: %v", err)
	}
	t.Logf(".part holds %d bytes", partSize)

	// A new agent picks the fetch up from the .part.
	o.mu.Lock()
	o.stallAfter = 0
	o.ranges = nil
	o.mu.Unlock()
	b := newTestAgent(t, cfg)
	lc2, _ := start(t, b)
	p, err := lc2.Ensure(context.Background(), api.EnsureRequest{Source: source}, nil)
	if err != nil || p != target {
		t.Fatalf("resumed Ensure = %q, %v", p, err)
	}
	got, _ := os.ReadFile(target)
	if !bytes.Equal(got, o.data) {
		t.Error("resumed file differs from the origin's")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	resumed := false
	for _, r := range o.ranges {
		if strings.HasPrefix(r, "bytes=") && !strings.HasPrefix(r, "bytes=0-") {
			resumed = true
		}
	}
	if !resumed {
		t.Errorf("the second fetch asked for ranges %q; want one starting past 0", o.ranges)
	}
}

func TestFetchRate(t *testing.T) {
	t0 := time.Now()
	f := &fetchState{started: t0, done: 30 << 20, samples: []sample{{t0, 0}, {t0.Add(time.Second), 10 << 20}, {t0.Add(3 * time.Second), 30 << 20}}}
	if r := f.rate(t0.Add(3 * time.Second)); r != 10<<20 {
		t.Errorf("rate = %v, want 10 MiB/s", r)
	}
	// Nothing arrived for as long again: the rate halves rather than
	// staying at its last value.
	if r := f.rate(t0.Add(6 * time.Second)); r != 5<<20 {
		t.Errorf("rate after a stall = %v, want 5 MiB/s", r)
	}
	if r := (&fetchState{}).rate(t0); r != 0 {
		t.Errorf("rate without samples = %v", r)
	}
}

// TestProgressAccounting checks that bytes an earlier attempt left in a
// .part are not counted as fetched again when a fetch resumes.
func TestProgressAccounting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		resumed bool
		want    float64
	}{
		{name: "fresh", want: 300},
		{name: "resumed from a .part", resumed: true, want: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAgent(t, testConfig(t))
			sub := newSubscriber()
			a.flights["hf:o/r/m.gguf"] = &flight{source: "hf:o/r/m.gguf", waiters: 1, resumed: tc.resumed, subs: map[*subscriber]struct{}{sub: {}}}
			for _, done := range []int64{100, 250, 300} {
				a.onProgress(fetch.Progress{Source: "hf:o/r/m.gguf", Done: done, Total: 300})
			}
			a.onProgress(fetch.Progress{Source: "other", Done: 5, Total: 5}) // nobody waits: ignored
			if got := testutil.ToFloat64(a.metrics.fetchedBytes); got != tc.want {
				t.Errorf("fetched_bytes_total = %v, want %v", got, tc.want)
			}
			f, ok := sub.take()
			if !ok || f.Done != 300 || f.Total != 300 || f.Progressed.Before(f.Started) {
				t.Errorf("subscriber got %+v, %v", f, ok)
			}
			if fs := a.fetchesNow(time.Now()); len(fs) != 1 {
				t.Errorf("fetches in progress = %+v, want the one", fs)
			}
		})
	}
}

// flightWaiters is how many ensures wait on the agent's fetch of source.
func flightWaiters(a *Agent, source string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fl := a.flights[source]; fl != nil {
		return fl.waiters
	}
	return 0
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
