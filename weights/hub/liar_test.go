package hub

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestTreeBounded: a Hub (a mirror, a proxy) whose tree listing never ends
// is stopped after a bounded number of entries, whatever their type: it
// listed only directories, page after page, which were not counted, and
// models add read ten thousand pages of 32 MB at most before it gave up.
func TestTreeBounded(t *testing.T) {
	var pages atomic.Int64
	commit := strings.Repeat("a", 40)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/revision/main"):
			fmt.Fprintf(w, `{"id":"org/endless","sha":%q}`, commit)
		case strings.Contains(r.URL.Path, "/tree/"):
			n := pages.Add(1)
			w.Header().Set("Link", fmt.Sprintf(`<%s%s?recursive=true&cursor=%d>; rel="next"`, srv.URL, r.URL.Path, n))
			var b strings.Builder
			b.WriteString("[")
			for i := range 1000 {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, `{"type":"directory","path":"d%d/%d","oid":%q,"size":0}`, n, i, commit)
			}
			b.WriteString("]")
			w.Write([]byte(b.String()))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := (&Client{Endpoint: srv.URL, Retries: -1}).Resolve(ctx, "org/endless", "main")
	if err == nil || !strings.Contains(err.Error(), "entries") {
		t.Errorf("Resolve of an endless listing = %v; want it refused for its entries", err)
	}
	if n := pages.Load(); n > 200 {
		t.Errorf("read %d pages of an endless listing before stopping", n)
	}
}
