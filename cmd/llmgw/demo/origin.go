package demo

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// An Origin serves the files of one directory over HTTP on 127.0.0.1, with
// ranges (so a fetch uses several connections and resumes), at a rate shared
// by every connection: the demo is on one machine, where a fetch would
// otherwise end before anyone saw it move.
type Origin struct {
	dir string
	srv *http.Server
	ln  net.Listener
	lim *limiter
}

// NewOrigin serves dir on a free port of 127.0.0.1 at rate bytes per second.
func NewOrigin(dir string, rate float64) (*Origin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &Origin{dir: dir, ln: ln, lim: &limiter{rate: rate}}
	o.srv = &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 5 * time.Second}
	go o.srv.Serve(ln)
	return o, nil
}

// URL is the address of file on the origin.
func (o *Origin) URL(file string) string {
	return "http://" + o.ln.Addr().String() + "/" + file
}

// SetRate changes the shared rate; transfers under way slow down or speed
// up from their next chunk.
func (o *Origin) SetRate(rate float64) { o.lim.setRate(rate) }

// Close stops the origin and ends the transfers under way.
func (o *Origin) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := o.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = o.srv.Close()
	}
	return err
}

func (o *Origin) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET or HEAD only", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" || strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(filepath.Join(o.dir, name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	http.ServeContent(&throttled{ResponseWriter: w, lim: o.lim, ctx: r.Context()}, r, name, st.ModTime(), f)
}

// throttled paces a response body through the origin's limiter.
type throttled struct {
	http.ResponseWriter
	lim *limiter
	ctx context.Context
}

// chunk is the unit of pacing: small enough that several connections share
// the rate evenly, large enough that pacing costs nothing.
const chunk = 64 << 10

func (t *throttled) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), chunk)]
		if err := t.lim.wait(t.ctx, len(c)); err != nil {
			return n, err
		}
		m, err := t.ResponseWriter.Write(c)
		n += m
		if err != nil {
			return n, err
		}
		b = b[len(c):]
	}
	return n, nil
}

// limiter hands out send times at rate bytes per second, first come first
// served, over every connection.
type limiter struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

func (l *limiter) setRate(rate float64) {
	l.mu.Lock()
	l.rate = rate
	l.mu.Unlock()
}

func (l *limiter) wait(ctx context.Context, n int) error {
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
