package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestProgressPercent(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Progress
		want int
	}{
		{"unknown total", Progress{Done: 5, Total: -1}, -1},
		{"zero total", Progress{Done: 0, Total: 0}, -1},
		{"start", Progress{Done: 0, Total: 10}, 0},
		{"half", Progress{Done: 5, Total: 10}, 50},
		{"done", Progress{Done: 10, Total: 10}, 100},
		{"large", Progress{Done: 150 << 30, Total: 300 << 30}, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Percent(); got != tc.want {
				t.Errorf("%+v.Percent() = %d, want %d", tc.p, got, tc.want)
			}
		})
	}
}

func TestEnsureLocalSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(file, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &Fetcher{} // no cache: none of these may need one
	ctx := context.Background()

	t.Run("present path", func(t *testing.T) {
		got, err := f.Ensure(ctx, file, Want{})
		if err != nil || got != file {
			t.Fatalf("Ensure(%q) = %q, %v; want the path unchanged", file, got, err)
		}
	})
	t.Run("missing path", func(t *testing.T) {
		for _, p := range []string{filepath.Join(dir, "gone.gguf"), "./no/such.gguf", "../no/such.gguf", file + "/below-a-file"} {
			_, err := f.Ensure(ctx, p, Want{})
			if !errors.Is(err, ErrNotLocal) {
				t.Errorf("Ensure(%q) = %v, want an error wrapping ErrNotLocal", p, err)
			}
			if err != nil && !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name %s", err, p)
			}
		}
	})
	t.Run("model id", func(t *testing.T) {
		for _, id := range []string{"Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B", "gpt2"} {
			got, err := f.Ensure(ctx, id, Want{})
			if err != nil || got != id {
				t.Errorf("Ensure(%q) = %q, %v; want it unchanged for the engine", id, got, err)
			}
		}
	})
	t.Run("remote without cache dir", func(t *testing.T) {
		_, err := f.Ensure(ctx, "https://example.invalid/model.gguf", Want{})
		if err == nil || !strings.Contains(err.Error(), "cache") {
			t.Fatalf("Ensure without CacheDir = %v, want an error about the cache directory", err)
		}
	})
}

// TestEnsureBadSources covers the inputs refused before any request.
func TestEnsureBadSources(t *testing.T) {
	f := testFetcher(t)
	for _, tc := range []struct {
		name, source, cause string
	}{
		{"empty", "", "empty source"},
		{"ftp scheme", "ftp://example.com/model.gguf", "unknown scheme"},
		{"s3 scheme", "s3://bucket/model.gguf", "unknown scheme"},
		{"file scheme", "file:///tmp/model.gguf", "unknown scheme"},
		{"space in host", "http://exa mple.com/model.gguf", "malformed URL"},
		{"no host", "http:///model.gguf", "no host"},
		{"bare scheme", "https://", "no host"},
		{"directory URL", "https://example.com/models/", "directory"},
		{"hf repository", "hf:Qwen/Qwen2.5-7B-Instruct", "names a repository, not a file"},
		{"hf org only", "hf:Qwen", "names a repository, not a file"},
		{"hf empty revision", "hf:org/repo@/model.gguf", "empty revision"},
		{"hf traversal", "hf:org/repo/../x.gguf", `file path "../x.gguf": has an empty, "." or ".." part`},
		{"bad sha", "https://example.com/model.gguf#sha", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Want{}
			if tc.name == "bad sha" {
				want.SHA256, tc.cause = "abc", "not 64 hex digits"
			}
			p, err := f.Ensure(context.Background(), tc.source, want)
			if err == nil {
				t.Fatalf("Ensure(%q) = %q, nil; want an error", tc.source, p)
			}
			var fe *Error
			if !errors.As(err, &fe) || fe.Source != tc.source {
				t.Errorf("error %v is not a *Error for %q", err, tc.source)
			}
			if !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("Ensure(%q) = %q, want it to say %q", tc.source, err, tc.cause)
			}
			if tc.source != "" && !strings.Contains(err.Error(), tc.source) {
				t.Errorf("error %q does not name the source", err)
			}
		})
	}
}

func TestEnsureFetchesIntoCache(t *testing.T) {
	o := newFakeOrigin(t, 300<<10)
	f := testFetcher(t)
	got := mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data), Size: int64(len(o.data))})
	if want := catalog.CachePathFor(f.CacheDir, o.url()); got != want {
		t.Errorf("path = %s, want catalog.CachePathFor's %s", got, want)
	}
	assertFile(t, got, o.data)
	for _, leftover := range []string{got + catalog.PartSuffix, got + catalog.RangesSuffix, got + catalog.RangesTmpSuffix} {
		assertAbsent(t, leftover)
	}
	// Present now: no second request.
	before := len(o.requests())
	if again := mustEnsure(t, f, o.url(), Want{}); again != got {
		t.Errorf("second Ensure = %s, want %s", again, got)
	}
	if n := len(o.requests()); n != before {
		t.Errorf("second Ensure made %d requests, want none", n-before)
	}
}

// TestEnsureSharesOneFetch: eight shards of a replica starting at once must
// cost one download, not eight.
func TestEnsureSharesOneFetch(t *testing.T) {
	o := newFakeOrigin(t, 512<<10)
	o.writeDelay = 5 * time.Millisecond
	f := testFetcher(t)
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = f.Ensure(context.Background(), o.url(), Want{})
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %q, %v; want %q", i, paths[i], errs[i], paths[0])
		}
	}
	if n := len(o.requests()); n != 1 {
		t.Errorf("eight callers made %d requests, want 1", n)
	}
	assertFile(t, paths[0], o.data)
}

// TestEnsureCancelContract: one caller giving up does not fail the others;
// the last one leaving cancels the fetch, and what it got is kept. The
// origin holds the file half way, and the callers give up when the test
// says, so each case happens in the state it is about.
func TestEnsureCancelContract(t *testing.T) {
	t.Run("impatient caller does not fail a patient one", func(t *testing.T) {
		o := newFakeOrigin(t, 1<<20)
		release := make(chan struct{})
		o.set(func(o *fakeOrigin) { o.override = heldOrigin(o, 512<<10, release) })
		f := testFetcher(t)
		impatient, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		var patientPath string
		var patientErr, impatientErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, impatientErr = f.Ensure(impatient, o.url(), Want{})
		}()
		go func() {
			defer wg.Done()
			patientPath, patientErr = f.Ensure(context.Background(), o.url(), Want{})
		}()
		waitFor(t, "both callers to wait on the fetch, half way", func() bool { return waiters(f) == 2 && o.served.Load() >= 512<<10 })
		cancel()
		waitFor(t, "the impatient caller to leave", func() bool { return waiters(f) == 1 })
		close(release)
		wg.Wait()
		if !errors.Is(impatientErr, context.Canceled) {
			t.Errorf("impatient caller got %v, want its own cancellation", impatientErr)
		}
		if patientErr != nil {
			t.Fatalf("patient caller got %v; one caller giving up must not fail the others", patientErr)
		}
		assertFile(t, patientPath, o.data)
		if n := len(o.requests()); n != 1 {
			t.Errorf("%d requests, want the one shared fetch", n)
		}
	})
	t.Run("last caller leaving cancels the fetch", func(t *testing.T) {
		// Held past the first 1 MiB write, so that bytes are on disk.
		o := newFakeOrigin(t, 3<<20)
		release := make(chan struct{})
		defer close(release)
		o.set(func(o *fakeOrigin) { o.override = heldOrigin(o, 3<<19, release) })
		f := testFetcher(t)
		target := catalog.CachePathFor(f.CacheDir, o.url())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { _, err := f.Ensure(ctx, o.url(), Want{}); errc <- err }()
		waitFor(t, "bytes of the fetch on disk", func() bool {
			st, err := os.Stat(target + catalog.PartSuffix)
			return err == nil && st.Size() >= 1<<20
		})
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Ensure = %v, want the cancellation", err)
		}
		waitFor(t, "the origin to see the client go away", func() bool { return o.aborted.Load() == 1 })
		// The canceled fetch stops writing; what it wrote stays for a resume.
		waitFor(t, "the canceled fetch to finish", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.inflight) == 0
		})
		assertAbsent(t, target)
		st, err := os.Stat(target + catalog.PartSuffix)
		if err != nil || st.Size() < 1<<20 || st.Size() >= int64(len(o.data)) {
			t.Fatalf("partial file after cancel: %v, %v; want the bytes that arrived kept", st, err)
		}
		kept := st.Size()
		o.set(func(o *fakeOrigin) { o.override = nil })
		assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
		reqs := o.requests()
		last := reqs[len(reqs)-1]
		if want := fmt.Sprintf("bytes=%d-", kept); last.Range != want || last.IfRange != `"v1"` {
			t.Errorf("resume request Range %q If-Range %q, want %q with the ETag", last.Range, last.IfRange, want)
		}
	})
}

// waiters is how many callers wait on the Fetcher's one fetch in flight.
func waiters(f *Fetcher) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.inflight {
		return c.waiters
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, 5*time.Second, cond)
}

// waitForWithin is waitFor for a state that a loaded machine (the race
// detector, the other packages' tests on two cores) reaches late: the bound
// only stops a test that would never get there.
func waitForWithin(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEnsureProgress(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noLength bool
	}{
		{"known length", false},
		{"no Content-Length", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFakeOrigin(t, 1<<20)
			o.writeDelay = 3 * time.Millisecond
			o.noLength = tc.noLength
			f := testFetcher(t)
			f.ProgressInterval = 10 * time.Millisecond
			var mu sync.Mutex
			var seen []Progress
			f.OnProgress = func(p Progress) {
				mu.Lock()
				seen = append(seen, p)
				mu.Unlock()
			}
			assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
			mu.Lock()
			defer mu.Unlock()
			if len(seen) < 2 {
				t.Fatalf("%d progress reports, want several", len(seen))
			}
			// ~100 ms of fetch at a 10 ms interval: throttled, not per read.
			if len(seen) > 60 {
				t.Errorf("%d progress reports for a 1 MiB file; not throttled", len(seen))
			}
			for i, p := range seen {
				if p.Source != o.url() {
					t.Errorf("report %d source %q", i, p.Source)
				}
				if i > 0 && p.Done < seen[i-1].Done {
					t.Errorf("report %d went backwards: %d after %d", i, p.Done, seen[i-1].Done)
				}
			}
			last := seen[len(seen)-1]
			if last.Done != int64(len(o.data)) {
				t.Errorf("last report Done = %d, want %d", last.Done, len(o.data))
			}
			if tc.noLength {
				if mid := seen[0]; mid.Total != -1 || mid.Percent() != -1 {
					t.Errorf("report without a length = %+v, Percent %d; want Total -1, Percent -1", mid, mid.Percent())
				}
			} else if last.Percent() != 100 {
				t.Errorf("last report %d%%, want 100", last.Percent())
			}
		})
	}
}

// failedFetch checks the promise for every bad input: a *Error naming
// the source and the cause, and nothing under the real name.
func failedFetch(t *testing.T, f *Fetcher, source string, want Want, cause string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := f.Ensure(ctx, source, want)
	if err == nil {
		t.Fatalf("Ensure(%q) = %q, nil; want an error about %q", source, p, cause)
	}
	var fe *Error
	if !errors.As(err, &fe) {
		t.Errorf("error %v is not a *Error", err)
	}
	if !strings.Contains(err.Error(), source) {
		t.Errorf("error %q does not name the source %s", err, source)
	}
	if !strings.Contains(err.Error(), cause) {
		t.Errorf("error %q does not say %q", err, cause)
	}
	if f.CacheDir != "" {
		assertAbsent(t, catalog.CachePathFor(f.CacheDir, source))
	}
	return err
}

func TestEnsureHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     []int
		retryAfter string
		cause      string
		requests   int // with Retries 2
	}{
		{"404", []int{404}, "", "404 Not Found; check the URL", 1},
		{"403", []int{403}, "", "403 Forbidden; the origin refused access", 1},
		{"401", []int{401}, "", "401 Unauthorized", 1},
		{"500 every time", []int{500, 500, 500}, "", "500 Internal Server Error", 3},
		{"429 every time", []int{429, 429, 429}, "", "429 Too Many Requests", 3},
		{"503 every time", []int{503, 503, 503}, "", "503 Service Unavailable", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFakeOrigin(t, 64<<10)
			o.status = tc.status
			f := testFetcher(t)
			failedFetch(t, f, o.url(), Want{}, tc.cause)
			if n := len(o.requests()); n != tc.requests {
				t.Errorf("%d requests, want %d (4xx are final; 5xx and 429 are retried)", n, tc.requests)
			}
		})
	}
	t.Run("500 then success", func(t *testing.T) {
		o := newFakeOrigin(t, 64<<10)
		o.status = []int{500, 502}
		assertFile(t, mustEnsure(t, testFetcher(t), o.url(), Want{}), o.data)
	})
	t.Run("429 with Retry-After is respected", func(t *testing.T) {
		o := newFakeOrigin(t, 64<<10)
		o.status = []int{429}
		o.retryAfter = "1"
		start := time.Now()
		assertFile(t, mustEnsure(t, testFetcher(t), o.url(), Want{}), o.data)
		if took := time.Since(start); took < time.Second {
			t.Errorf("retried after %s; the server asked for 1s", took)
		}
	})
}

// An origin that asks for an hour's pause fails the fetch at once, saying
// so, instead of holding the fetch (and a Prolog) for that hour.
func TestEnsureRetryAfterTooLong(t *testing.T) {
	o := newFakeOrigin(t, 64<<10)
	o.status = []int{503, 503}
	o.retryAfter = "3600"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := testFetcher(t).Ensure(ctx, o.url(), Want{})
	if err == nil || !strings.Contains(err.Error(), "asked to wait 1h0m0s") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Ensure = %v; want the origin's hour-long Retry-After named, at once", err)
	}
	if n := len(o.requests()); n != 1 {
		t.Errorf("%d requests; an origin that asked for an hour must not be asked again now", n)
	}
}

func TestEnsureRedirectLoop(t *testing.T) {
	o := newFakeOrigin(t, 1024)
	o.override = func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}
	f := testFetcher(t)
	failedFetch(t, f, o.url(), Want{}, "redirects")
	if n := len(o.requests()); n > 11 {
		t.Errorf("%d requests; a redirect loop must not be retried", n)
	}
}

func TestEnsureIgnoresRange(t *testing.T) {
	// First attempt is cut, leaving a .part; the server then ignores Range.
	o := newFakeOrigin(t, 600<<10)
	o.cutAfter, o.cuts = 200<<10, 1
	f := testFetcher(t)
	f.Retries = -1
	failedFetch(t, f, o.url(), Want{}, "unexpected EOF")
	part := catalog.CachePathFor(f.CacheDir, o.url()) + catalog.PartSuffix
	if st, err := os.Stat(part); err != nil || st.Size() != 200<<10 {
		t.Fatalf("after the cut: %v %v; want the 200 KiB kept", st, err)
	}
	o.set(func(o *fakeOrigin) { o.ignoreRange = true })
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	reqs := o.requests()
	if last := reqs[len(reqs)-1]; last.Range == "" || last.Status != 200 {
		t.Errorf("resume request %+v; want a range answered with 200", last)
	}
}

func TestEnsureConnectionCut(t *testing.T) {
	t.Run("retried in place", func(t *testing.T) {
		o := newFakeOrigin(t, 600<<10)
		o.cutAfter, o.cuts = 250<<10, 1
		f := testFetcher(t)
		assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)
		reqs := o.requests()
		if len(reqs) != 2 || reqs[1].Range != fmt.Sprintf("bytes=%d-", 250<<10) || reqs[1].IfRange != `"v1"` {
			t.Errorf("requests %+v; want a resume from 250 KiB with If-Range", reqs)
		}
		if s := o.served.Load(); s != int64(len(o.data)) {
			t.Errorf("origin served %d bytes for a %d-byte file; the resume re-fetched", s, len(o.data))
		}
	})
	t.Run("cut without retries, then resumed by the next Ensure", func(t *testing.T) {
		o := newFakeOrigin(t, 600<<10)
		o.cutAfter, o.cuts = 100<<10, -1
		f := testFetcher(t)
		f.Retries = -1
		failedFetch(t, f, o.url(), Want{}, "unexpected EOF")
		part := catalog.CachePathFor(f.CacheDir, o.url()) + catalog.PartSuffix
		st, err := os.Stat(part)
		if err != nil || st.Size() != 100<<10 {
			t.Fatalf(".part after the cut: %v %v; want 100 KiB kept", st, err)
		}
		o.set(func(o *fakeOrigin) { o.cuts = 0 })
		// The digest covers the bytes kept from the first attempt too.
		assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)
		if s := o.served.Load(); s != int64(len(o.data)) {
			t.Errorf("origin served %d bytes in all, want %d: nothing fetched twice", s, len(o.data))
		}
	})
	t.Run("a connection that keeps making progress keeps its retries", func(t *testing.T) {
		o := newFakeOrigin(t, 600<<10)
		o.cutAfter, o.cuts = 100<<10, -1
		f := testFetcher(t)
		f.Retries = 1
		assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
		if n := len(o.requests()); n != 6 {
			t.Errorf("%d requests, want 6 of 100 KiB each", n)
		}
	})
}

func TestEnsureStalledConnection(t *testing.T) {
	o := newFakeOrigin(t, 600<<10)
	o.stallAt, o.stalls = 128<<10, -1
	f := testFetcher(t)
	f.IdleTimeout = 200 * time.Millisecond
	f.Retries = 1
	start := time.Now()
	failedFetch(t, f, o.url(), Want{}, "no data received for 200ms")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s to give up on a stalled connection", took)
	}
	part := catalog.CachePathFor(f.CacheDir, o.url()) + catalog.PartSuffix
	if st, err := os.Stat(part); err != nil || st.Size() != 128<<10 {
		t.Fatalf(".part after stall: %v %v; want 128 KiB kept", st, err)
	}
	o.set(func(o *fakeOrigin) { o.stalls = 0 })
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
}

// TestEnsureRemoteChanged: the remote is replaced between attempts. curl -C -,
// wget -c and aria2c -c splice the two; llmgw must produce the new file.
func TestEnsureRemoteChanged(t *testing.T) {
	for _, tc := range []struct {
		name          string
		etag          bool // serve ETags (else Last-Modified only)
		ignoreIfRange bool
		parallel      bool
	}{
		{"If-Range by ETag", true, false, false},
		{"If-Range by Last-Modified", false, false, false},
		{"server ignores If-Range", true, true, false},
		{"parallel, If-Range by ETag", true, false, true},
		{"parallel, server ignores If-Range", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFakeOrigin(t, 2<<20)
			if !tc.etag {
				o.setData(o.data, "")
			}
			o.cutAfter, o.cuts = 700<<10, -1
			f := testFetcher(t)
			f.Retries = -1
			cause := "unexpected EOF"
			if tc.parallel {
				// Chunk 0 stalls while the others finish, so the state
				// records finished chunks of version 1 that must not be
				// spliced with version 2.
				o.cutAfter, o.cuts = 0, 0
				o.stallAt, o.stalls = 300<<10, -1
				f.ParallelMin, f.ChunkSize, f.Connections = 1<<20, 512<<10, 4
				f.IdleTimeout = 300 * time.Millisecond
				cause = "no data received"
			}
			failedFetch(t, f, o.url(), Want{}, cause)
			if tc.parallel {
				st := loadState(catalog.CachePathFor(f.CacheDir, o.url())+catalog.RangesSuffix, o.url())
				if st == nil || st.doneBytes() == 0 {
					t.Fatalf("state after the stall: %+v; want finished chunks of version 1", st)
				}
			}
			v2 := randomBytes(t, len(o.data))
			o.set(func(o *fakeOrigin) {
				o.cuts, o.stalls = 0, 0
				o.ignoreIfRange = tc.ignoreIfRange
				o.data = v2
				o.mod = o.mod.Add(time.Hour)
				if tc.etag {
					o.etag = `"v2"`
				}
			})
			assertFile(t, mustEnsure(t, f, o.url(), Want{}), v2)
		})
	}
}

func TestEnsureWrongSHA256(t *testing.T) {
	o := newFakeOrigin(t, 300<<10)
	f := testFetcher(t)
	wrong := strings.Repeat("ab", 32)
	err := failedFetch(t, f, o.url(), Want{SHA256: wrong}, "sha256 mismatch")
	if !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), sha256Hex(o.data)) {
		t.Errorf("error %q must name expected and actual digests", err)
	}
	target := catalog.CachePathFor(f.CacheDir, o.url())
	assertAbsent(t, target+catalog.PartSuffix)
	assertAbsent(t, target+catalog.RangesSuffix)

	t.Run("wrong size is refused before the download", func(t *testing.T) {
		// Slow, so that bytes served measure what the client asked for
		// rather than what fits in the socket buffers.
		o.set(func(o *fakeOrigin) { o.writeDelay = 20 * time.Millisecond })
		defer o.set(func(o *fakeOrigin) { o.writeDelay = 0 })
		before := o.served.Load()
		failedFetch(t, f, o.url(), Want{Size: 12345}, "expected 12345 bytes, the origin announces 307200")
		if s := o.served.Load() - before; s > 128<<10 {
			t.Errorf("origin served %d bytes of a file already known to be wrong", s)
		}
	})
	t.Run("wrong size found at the end", func(t *testing.T) {
		o.set(func(o *fakeOrigin) { o.noLength = true })
		failedFetch(t, f, o.url(), Want{Size: 12345}, "expected 12345 bytes, got 307200; discarded")
		assertAbsent(t, catalog.CachePathFor(f.CacheDir, o.url())+catalog.PartSuffix)
	})
}

func TestEnsureNotEnoughDisk(t *testing.T) {
	o := newFakeOrigin(t, 2<<20)
	o.writeDelay = 20 * time.Millisecond // see TestEnsureWrongSHA256
	f := testFetcher(t)
	statfsFree = func(string) (int64, string, error) { return 1 << 20, "/fake/mount", nil }
	t.Cleanup(func() { statfsFree = diskFree })
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			f.Connections, f.ParallelMin = conns, 1<<20
			err := failedFetch(t, f, o.url(), Want{}, "needs 2.1 MB, 1.0 MB free on /fake/mount")
			if !errors.Is(err, ErrNoSpace) {
				t.Errorf("error %v does not wrap ErrNoSpace", err)
			}
			if s := o.served.Load(); s > 256<<10 {
				t.Errorf("origin served %d bytes before the refusal", s)
			}
		})
	}
}

func TestNoSpaceDuringFetch(t *testing.T) {
	statfsFree = func(string) (int64, string, error) { return 4096, "/fake/mount", nil }
	t.Cleanup(func() { statfsFree = diskFree })
	err := noSpace(&os.PathError{Op: "write", Path: "x.part", Err: syscall.ENOSPC}, t.TempDir(), 10<<20)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "needs 10 MB more, 4.1 kB free on /fake/mount") {
		t.Errorf("noSpace(ENOSPC) = %v", err)
	}
	other := errors.New("EIO")
	if got := noSpace(other, t.TempDir(), 1); got != other {
		t.Errorf("noSpace(other) = %v, want it unchanged", got)
	}
}

func TestEnsureUnwritableCache(t *testing.T) {
	o := newFakeOrigin(t, 1024)
	f := testFetcher(t)
	// A regular file where the cache directory should be: unwritable for
	// root too, unlike a permission bit.
	blocker := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.CacheDir = filepath.Join(blocker, "cache")
	failedFetch(t, f, o.url(), Want{}, "cache directory cannot be created")
	if n := len(o.requests()); n != 0 {
		t.Errorf("%d requests to the origin for a fetch that could not be stored", n)
	}
}

func TestEnsureNoValidatorRestartsInsteadOfResuming(t *testing.T) {
	o := newFakeOrigin(t, 400<<10)
	o.noLength = true // no ETag, no Last-Modified, no length
	o.cutAfter, o.cuts = 100<<10, 1
	f := testFetcher(t)
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	for _, r := range o.requests()[1:] {
		if r.IfRange != "" {
			t.Errorf("request %+v carries If-Range with no validator to give", r)
		}
	}
}

// TestEnsureWrongContentRange: a 206 that is not exactly the bytes asked for
// is never written; the fetch starts over from a clean file.
func TestEnsureWrongContentRange(t *testing.T) {
	o := newFakeOrigin(t, 400<<10)
	o.cutAfter, o.cuts = 100<<10, 1
	f := testFetcher(t)
	f.Retries = -1
	failedFetch(t, f, o.url(), Want{}, "unexpected EOF")
	// A broken cache in front of the origin: every range is answered with
	// the file from the start, labelled as such.
	o.set(func(o *fakeOrigin) {
		o.override = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(o.data)-1, len(o.data)))
			w.Header().Set("Content-Length", fmt.Sprint(len(o.data)))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(o.data)
		}
	})
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	reqs := o.requests()
	if len(reqs) != 3 || reqs[1].Range != fmt.Sprintf("bytes=%d-", 100<<10) || reqs[2].Range != "bytes=0-" {
		t.Errorf("requests %+v; want the resume refused and a fresh fetch from 0", reqs)
	}
}

// TestEnsureCutThenReconnectRefused is a single-stream fetch whose
// connection is cut and whose reconnect is refused (an expired signed URL
// answers 404). It must fail cleanly, keeping the bytes it has: it once
// closed the nil body of the failed reconnect and took the agent down.
func TestEnsureCutThenReconnectRefused(t *testing.T) {
	o := newFakeOrigin(t, 300<<10)
	var calls atomic.Int32
	o.override = func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
		w.WriteHeader(http.StatusOK)
		w.Write(o.data[:100<<10])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // cut the connection mid-body
	}
	f := testFetcher(t)
	failedFetch(t, f, o.url(), Want{}, "404")
	part := catalog.CachePathFor(f.CacheDir, o.url()) + catalog.PartSuffix
	if st, err := os.Stat(part); err != nil || st.Size() != 100<<10 {
		t.Errorf("after the refused reconnect: %v %v; want the 100 KiB kept for a later resume", st, err)
	}
}

// TestEnsureCachedFileCheckedAgainstDigest: a file already in the cache is
// trusted for a digest only when it has that digest. One fetched without a
// digest, then asked for with the catalog's, is hashed once; a stale copy of
// the same size is fetched again; a verified one is not re-read or re-fetched.
func TestEnsureCachedFileCheckedAgainstDigest(t *testing.T) {
	o := newFakeOrigin(t, 200<<10)
	f := testFetcher(t)
	target := mustEnsure(t, f, o.url(), Want{})

	// The origin publishes a new file of the same size; the stale copy
	// must not satisfy a caller that knows the new digest.
	o.setData(randomBytes(t, 200<<10), `"v2"`)
	before := len(o.requests())
	assertFile(t, mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}), o.data)
	if len(o.requests()) == before {
		t.Fatal("a cached file with another sha256 was returned without fetching the new one")
	}

	// Now verified and recorded: asking again costs no request.
	before = len(o.requests())
	if p := mustEnsure(t, f, o.url(), Want{SHA256: sha256Hex(o.data)}); p != target {
		t.Errorf("Ensure = %s, want %s", p, target)
	}
	if n := len(o.requests()) - before; n != 0 {
		t.Errorf("%d requests for a cached file whose digest matches; want 0", n)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pw@cdn.example/a/b.gguf?X-Amz-Signature=s#f": "https://cdn.example/a/b.gguf",
		"http://127.0.0.1:8080/m.gguf":                             "http://127.0.0.1:8080/m.gguf",
		"http://[::1":                                              "(unparsable URL)",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
