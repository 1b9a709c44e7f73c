package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestEnsureParallel proves a large file is fetched over several TCP
// connections, each a bounded range carrying If-Range.
func TestEnsureParallel(t *testing.T) {
	o := newFakeOrigin(t, 8<<20)
	o.writeDelay = 2 * time.Millisecond // so the ranges overlap in time
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 512<<10
	assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)

	if n := o.conns.Load(); n < 4 {
		t.Errorf("%d TCP connections, want at least 4", n)
	}
	reqs := o.requests()
	if len(reqs) != 16 {
		t.Errorf("%d requests, want one per 512 KiB chunk (16)", len(reqs))
	}
	if reqs[0].Range != "bytes=0-" {
		t.Errorf("first request Range %q, want bytes=0-", reqs[0].Range)
	}
	for _, r := range reqs[1:] {
		var a, b int64
		if _, err := fmt.Sscanf(r.Range, "bytes=%d-%d", &a, &b); err != nil || b-a+1 != 512<<10 {
			t.Errorf("request Range %q, want a bounded 512 KiB range", r.Range)
		}
		if r.IfRange != `"v1"` {
			t.Errorf("request %q has If-Range %q, want the ETag", r.Range, r.IfRange)
		}
	}
	target := catalog.CachePathFor(f.CacheDir, o.url())
	assertAbsent(t, target+catalog.RangesSuffix)
}

// TestEnsureParallelResume: a parallel fetch that dies keeps the chunks it
// finished, and the next one does not ask for them again.
func TestEnsureParallelResume(t *testing.T) {
	o := newFakeOrigin(t, 8<<20)
	o.stallAt, o.stalls = 5<<20+100, -1 // inside the chunk at 5 MiB
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 1<<20
	f.IdleTimeout, f.Retries, f.MinSpeed = 300*time.Millisecond, -1, -1
	failedFetch(t, f, o.url(), Want{}, "no data received")

	target := catalog.CachePathFor(f.CacheDir, o.url())
	b, err := os.ReadFile(target + catalog.RangesSuffix)
	if err != nil {
		t.Fatalf("no range state after a failed parallel fetch: %v", err)
	}
	var st rangeState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 8<<20 || st.ETag != `"v1"` || !st.Parallel || st.doneBytes() == 0 {
		t.Fatalf("state %+v; want size, ETag and some finished chunks", st)
	}
	// Progress within the chunk is kept up to the stall, never past it.
	for _, d := range st.Done {
		if d[0] < 6<<20 && d[1] > 5<<20+100 {
			t.Fatalf("state claims %v, which covers the bytes after the stall", d)
		}
	}
	before := len(o.requests())

	o.set(func(o *fakeOrigin) { o.stalls = 0 })
	assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)
	for _, r := range o.requests()[before:] {
		var a, z int64
		if _, err := fmt.Sscanf(r.Range, "bytes=%d-%d", &a, &z); err != nil {
			t.Errorf("resumed request Range %q, want a bounded range", r.Range)
			continue
		}
		for _, d := range st.Done {
			if a < d[1] && z >= d[0] {
				t.Errorf("resumed fetch asked for %s, but bytes %d-%d were finished", r.Range, d[0], d[1]-1)
			}
		}
		if r.IfRange != `"v1"` {
			t.Errorf("resumed request %q without If-Range", r.Range)
		}
	}
}

func TestEnsureSmallFileUsesOneConnection(t *testing.T) {
	o := newFakeOrigin(t, 512<<10)
	f := testFetcher(t)
	f.ParallelMin = 1 << 20
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	if n := len(o.requests()); n != 1 {
		t.Errorf("%d requests for a file under ParallelMin, want 1", n)
	}
}

func TestRangeState(t *testing.T) {
	st := &rangeState{Source: "s", Size: 100, ETag: `"e"`}
	st.add(span{10, 20})
	st.add(span{30, 40})
	st.add(span{20, 30})
	st.add(span{90, 100})
	if got, want := fmt.Sprint(st.Done), "[[10 40] [90 100]]"; got != want {
		t.Errorf("Done = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(st.missing()), "[{0 10} {40 90}]"; got != want {
		t.Errorf("missing = %s, want %s", got, want)
	}
	if got := st.doneBytes(); got != 40 {
		t.Errorf("doneBytes = %d, want 40", got)
	}

	path := t.TempDir() + "/x.part.ranges"
	st.Parallel = true
	if err := st.save(path); err != nil {
		t.Fatal(err)
	}
	if got := loadState(path, "s"); got == nil || fmt.Sprint(got.Done) != fmt.Sprint(st.Done) {
		t.Errorf("loadState after save = %+v", got)
	}
	for _, tc := range []struct{ name, content, source string }{
		{"other source", `{"source":"t","size":100,"etag":"\"e\"","parallel":true}`, "s"},
		{"no validator", `{"source":"s","size":100,"parallel":true}`, "s"},
		{"range past the end", `{"source":"s","size":100,"etag":"\"e\"","parallel":true,"done":[[0,200]]}`, "s"},
		{"empty range", `{"source":"s","size":100,"etag":"\"e\"","parallel":true,"done":[[5,5]]}`, "s"},
		{"parallel without size", `{"source":"s","size":-1,"etag":"\"e\"","parallel":true}`, "s"},
		{"garbage", `{"source":`, "s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := loadState(path, tc.source); got != nil {
				t.Errorf("loadState(%s) = %+v, want nil: untrusted state is discarded", tc.content, got)
			}
		})
	}
}

// TestEnsureDiscardsUntrustedPart: a .part with no state beside it has no
// recorded version and is thrown away, never continued.
func TestEnsureDiscardsUntrustedPart(t *testing.T) {
	o := newFakeOrigin(t, 300<<10)
	f := testFetcher(t)
	target := catalog.CachePathFor(f.CacheDir, o.url())
	if err := os.MkdirAll(f.CacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target+catalog.PartSuffix, []byte(strings.Repeat("x", 100<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	if r := o.requests()[0]; r.Range != "bytes=0-" || r.IfRange != "" {
		t.Errorf("request %+v; want a fresh fetch from 0", r)
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want contentRange
		ok   bool
	}{
		{"bytes 0-99/100", contentRange{0, 99, 100}, true},
		{"bytes 100-199/*", contentRange{100, 199, -1}, true},
		{"bytes 5-4/100", contentRange{}, false},
		{"bytes */100", contentRange{}, false},
		{"items 0-1/2", contentRange{}, false},
		{"", contentRange{}, false},
		{"bytes 0-x/100", contentRange{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseContentRange(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("parseContentRange(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	if got := ParseRetryAfter("3"); got != 3*time.Second {
		t.Errorf("ParseRetryAfter(3) = %s", got)
	}
	if got := ParseRetryAfter(""); got != 0 {
		t.Errorf("ParseRetryAfter(\"\") = %s", got)
	}
	date := time.Now().Add(10 * time.Second).UTC().Format(http1Date)
	if got := ParseRetryAfter(date); got < 8*time.Second || got > 10*time.Second {
		t.Errorf("ParseRetryAfter(%q) = %s, want about 10s", date, got)
	}
	if got := ParseRetryAfter("soon"); got != 0 {
		t.Errorf("ParseRetryAfter(soon) = %s, want 0", got)
	}
}

const http1Date = "Mon, 02 Jan 2006 15:04:05 GMT"

// TestEnsureDeadline: the caller's context bounds the whole fetch, retries
// and backoff included.
func TestEnsureDeadline(t *testing.T) {
	o := newFakeOrigin(t, 64<<10)
	o.status = []int{503, 503, 503, 503, 503}
	f := testFetcher(t)
	f.RetryWait = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := f.Ensure(ctx, o.url(), Want{}); err == nil {
		t.Fatal("Ensure succeeded against a failing origin")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Ensure took %s with a 200ms deadline", took)
	}
}

func TestEnsureParallelWrongSHA256(t *testing.T) {
	o := newFakeOrigin(t, 4<<20)
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 512<<10
	wrong := strings.Repeat("cd", 32)
	failedFetch(t, f, o.url(), Want{SHA256: wrong}, "sha256 mismatch: expected "+wrong+", got "+sha256Hex(o.data))
	target := catalog.CachePathFor(f.CacheDir, o.url())
	assertAbsent(t, target+catalog.PartSuffix)
	assertAbsent(t, target+catalog.RangesSuffix)
}

// TestDefaultClientIsHTTP1: against an origin offering HTTP/2, the default
// client still speaks HTTP/1.1, so each range is its own TCP flow.
func TestDefaultClientIsHTTP1(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	if resp, err := srv.Client().Get(srv.URL); err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("the test server does not offer HTTP/2 (%v, %v)", resp, err)
	}
	c := newClient(8, time.Second)
	tr := c.Transport.(*http.Transport)
	// Trust the test certificate, and nothing else of the test client's
	// configuration (its ALPN list would offer h2).
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tr.TLSClientConfig.NextProtos = nil
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Errorf("default client spoke %s, want HTTP/1.1", resp.Proto)
	}
}

// TestEnsureParallelDropsTrickle: one connection of a parallel fetch sends a
// byte every 100 ms — never idle, never useful. It must be dropped for
// falling below MinSpeed and its range fetched by another connection,
// instead of holding the fetch for as long as it trickles.
func TestEnsureParallelDropsTrickle(t *testing.T) {
	o := newFakeOrigin(t, 4<<20)
	var trickled atomic.Bool
	o.set(func(o *fakeOrigin) {
		o.override = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v1"`)
			if r.Header.Get("Range") == fmt.Sprintf("bytes=%d-%d", 1<<20, 2<<20-1) && trickled.CompareAndSwap(false, true) {
				w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", 1<<20, 2<<20-1, len(o.data)))
				w.Header().Set("Content-Length", fmt.Sprint(1<<20))
				w.WriteHeader(http.StatusPartialContent)
				for i := 0; ; i++ {
					if _, err := w.Write(o.data[1<<20+i : 1<<20+i+1]); err != nil {
						return
					}
					http.NewResponseController(w).Flush()
					select {
					case <-r.Context().Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
			http.ServeContent(w, r, "model.gguf", o.mod, bytes.NewReader(o.data))
		}
	})
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 1<<20
	f.IdleTimeout, f.MinSpeed = time.Second, 64<<10
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := f.Ensure(ctx, o.url(), Want{SHA256: sha256Hex(o.data)})
	if err != nil {
		t.Fatalf("Ensure with a trickling connection = %v; it must be dropped and its range fetched by another", err)
	}
	assertFile(t, p, o.data)
	if !trickled.Load() {
		t.Fatal("the trickle never ran; the test tested nothing")
	}
}

// TestEnsureParallelStateWithoutItsPart: the record of finished chunks is
// about the bytes of one .part. When that .part is gone (an operator removed
// it to force a fresh fetch, or a kill fell between the two removals of
// giveBack or dropEmptyPart), a new empty .part holds none of them, and a
// fetch that trusted the record would fill only the other ranges and rename
// a file whose "finished" ranges are zeros: with no digest to check, that
// corrupt file would be served as the model.
func TestEnsureParallelStateWithoutItsPart(t *testing.T) {
	o := newFakeOrigin(t, 8<<20)
	o.stallAt, o.stalls = 5<<20+100, -1
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 1<<20
	f.IdleTimeout, f.Retries, f.MinSpeed = 300*time.Millisecond, -1, -1
	failedFetch(t, f, o.url(), Want{}, "no data received")

	target := catalog.CachePathFor(f.CacheDir, o.url())
	if _, err := os.Stat(target + catalog.RangesSuffix); err != nil {
		t.Fatalf("no range state after a failed parallel fetch: %v", err)
	}
	if err := os.Remove(target + catalog.PartSuffix); err != nil {
		t.Fatal(err)
	}

	o.set(func(o *fakeOrigin) { o.stalls = 0 })
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
}

// TestEnsureParallelOriginIgnoresBoundedRanges: an origin (a proxy, as some
// are) that answers "bytes=N-" but sends the whole file for "bytes=N-M".
// The fetch goes on as one stream from the bytes it has, instead of taking
// it for a changed remote, throwing its bytes away and failing after
// maxRestarts tries.
func TestEnsureParallelOriginIgnoresBoundedRanges(t *testing.T) {
	o := newFakeOrigin(t, 8<<20)
	var bounded, open atomic.Int64
	o.override = func(w http.ResponseWriter, r *http.Request) {
		data := o.data
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Accept-Ranges", "bytes")
		var a, b int64
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b); err == nil {
			bounded.Add(1)
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			w.WriteHeader(http.StatusOK)
			w.Write(data)
			return
		}
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &a); err == nil {
			open.Add(1)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, len(data)-1, len(data)))
			w.Header().Set("Content-Length", fmt.Sprint(int64(len(data))-a))
			w.WriteHeader(http.StatusPartialContent)
			for off := a; off < int64(len(data)); off += 64 << 10 {
				w.Write(data[off:min(off+64<<10, int64(len(data)))])
				time.Sleep(time.Millisecond) // so the bounded requests come while this streams
			}
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.Write(data)
	}
	f := testFetcher(t)
	f.Connections, f.ParallelMin, f.ChunkSize = 4, 1<<20, 512<<10
	assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)
	if bounded.Load() == 0 {
		t.Fatal("no bounded range was asked; the test does not exercise the parallel path")
	}
	if n := open.Load(); n > 2 {
		t.Errorf("%d open-ended requests; the fetch should go on as one stream after the first refusal, not start over", n)
	}
}
