package agent

// Pins hold on every path (issue 24, item 1): a caller that joins a swarm
// fetch of a cache file gets the path only when the file is the bytes it
// pinned, never because another caller's fetch of the same file ended.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// pinOrigin serves one file at a bounded rate, the first GET the bytes of
// first and every later one the bytes of then (an origin that published a
// new version, which an admin re-pinned), and counts the GETs.
type pinOrigin struct {
	url         string
	first, then []byte
	rate        int64
	gets        atomic.Int32
}

func newPinOrigin(t *testing.T, first, then []byte, rate int64) *pinOrigin {
	o := &pinOrigin{first: first, then: then, rate: rate}
	o.url = serveOrigin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, etag := o.then, `"then"`
		if o.gets.Add(1) == 1 {
			data, etag = o.first, `"first"`
		}
		w.Header().Set("ETag", etag)
		http.ServeContent(&throttled{ResponseWriter: w, rate: o.rate, count: func(int) {}}, r, "model.bin", time.Unix(1e9, 0), bytes.NewReader(data))
	}))
	return o
}

func hexOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// pinAgent runs one agent of fabric ib-a with its chunk server (peer_addr
// set: the swarm path) against the real coordinator, and returns it with a
// client for its socket, as the Prolog speaks to it, and a function that
// pins the catalog's model of source to data (a swarm is only for a
// catalog file at its pin: pinning again is an admin's repin).
func pinAgent(t *testing.T, k, port int) (*Agent, *api.LocalClient, func(source string, data []byte)) {
	realm := mungetest.New(t)
	e := emptyFabric(t, realm, nil, "", 0)
	e.url = startCoordinator(t, realm, map[string]string{nodeName(k): fmt.Sprintf("127.0.0.%d", k)}, 0)
	a := startSwarmAgent(t, e, k, port)
	pin := func(source string, data []byte) { addCatalogFile(t, e.url, source, hexOf(data), int64(len(data))) }
	return a, &api.LocalClient{Socket: a.Config().Socket}, pin
}

// TestSwarmEnsureJoinerWithAnotherPin is the review's minimal form: two
// POST /v1/ensure on one agent with peer_addr set, one source, sha256 V1
// then V2 1.5 s later, while the first fetch runs. The second caller must
// not be handed the path of the first pin's bytes: it gets its own fetch,
// which here finds V2 (the origin serves its new version to every request
// after the first), so its path holds V2 when it is answered.
func TestSwarmEnsureJoinerWithAnotherPin(t *testing.T) {
	v1, _ := testData(t, 3<<20+4321)
	v2, _ := testData(t, len(v1))
	// 1.5 MiB/s: the first fetch takes about 2 s, so the second ensure
	// arrives while it runs.
	o := newPinOrigin(t, v1, v2, 3<<19)
	a, lc, pin := pinAgent(t, 111, 0)
	pin(o.url, v1)

	type answer struct {
		path string
		sum  string // of the file at path when the answer came
		err  error
	}
	ask := func(data []byte) answer {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		p, err := lc.Ensure(ctx, api.EnsureRequest{Source: o.url, SHA256: hexOf(data), Size: int64(len(data))}, nil)
		if err != nil {
			return answer{err: err}
		}
		b, rerr := os.ReadFile(p)
		if rerr != nil {
			return answer{path: p, err: rerr}
		}
		return answer{path: p, sum: hexOf(b)}
	}
	var first, second answer
	var wg sync.WaitGroup
	wg.Go(func() { first = ask(v1) })
	time.Sleep(1500 * time.Millisecond)
	if n := o.gets.Load(); n != 1 {
		t.Fatalf("the origin had %d requests 1.5 s into the first fetch, want 1 (the first fetch is to be under way)", n)
	}
	pin(o.url, v2) // the admin re-pins to the origin's new version
	wg.Go(func() { second = ask(v2) })
	wg.Wait()
	if first.err != nil {
		t.Fatalf("the ensure for V1: %v", first.err)
	}
	if first.sum != hexOf(v1) {
		t.Errorf("the ensure for V1 was answered with %s, which held sha256 %s", first.path, first.sum)
	}
	if second.err != nil {
		t.Fatalf("the ensure for V2 (its own fetch, the origin serving V2): %v", second.err)
	}
	if second.sum != hexOf(v2) {
		t.Fatalf("the ensure for V2 was answered with %s, which held sha256 %s (V1 is %s): a job got the bytes of another pin", second.path, second.sum, hexOf(v1))
	}
	if n := o.gets.Load(); n < 2 {
		t.Errorf("the origin had %d requests; the V2 caller needed a fetch of its own", n)
	}
	_ = a
}

// TestSwarmEnsureJoinerWithAnotherPinRefused: the same, the origin serving
// V1 throughout: the V2 caller's own fetch finds V1 and fails, naming both
// digests; the cache file stays V1's.
func TestSwarmEnsureJoinerWithAnotherPinRefused(t *testing.T) {
	v1, _ := testData(t, 3<<20+4321)
	other, _ := testData(t, len(v1))
	o := newPinOrigin(t, v1, v1, 3<<19)
	_, lc, pin := pinAgent(t, 112, 0)
	pin(o.url, v1)
	req := func(sum string) api.EnsureRequest {
		return api.EnsureRequest{Source: o.url, SHA256: sum, Size: int64(len(v1))}
	}
	var p1 string
	var err1, err2 error
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wg.Go(func() { p1, err1 = lc.Ensure(ctx, req(hexOf(v1)), nil) })
	time.Sleep(1500 * time.Millisecond)
	pin(o.url, other)
	var p2 string
	wg.Go(func() { p2, err2 = lc.Ensure(ctx, req(hexOf(other)), nil) })
	wg.Wait()
	if err1 != nil {
		t.Fatalf("the ensure for V1: %v", err1)
	}
	if err2 == nil {
		t.Fatalf("the ensure for V2 was answered with %s; the origin serves only V1", p2)
	}
	if !strings.Contains(err2.Error(), hexOf(other)) || !strings.Contains(err2.Error(), hexOf(v1)) {
		t.Errorf("the V2 caller's error does not name both digests: %v", err2)
	}
	b, err := os.ReadFile(p1)
	if err != nil || hexOf(b) != hexOf(v1) {
		t.Errorf("the cache file %s is no longer V1 after the refused V2 fetch (%v)", p1, err)
	}
}
