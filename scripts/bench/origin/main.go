// Command origin serves one file over HTTP/1.1 on 127.0.0.1 for the fetch
// benchmark, with an optional bandwidth cap per TCP connection.
//
// The cap is per connection, not per request or per server, because that is
// how the origins weights come from behave: a CDN or object store gives each
// flow a share, and a client that opens eight flows gets eight shares. That is
// the situation multi-connection fetching exists for, and a benchmark without
// it would only measure the loopback interface.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type connKey struct{}

// maxLag is how far behind schedule a connection may fall and still catch up.
const maxLag = 20 * time.Millisecond

// pacer holds one connection to rate bytes per second: each write moves the
// earliest time the next may start.
type pacer struct {
	rate float64
	next time.Time
}

func (p *pacer) wait(n int) {
	now := time.Now()
	// Idle time is not saved up into a burst, but lateness within a few
	// milliseconds is made up: a sleep overshoots by up to a millisecond, and
	// forgetting that would cap a connection well below the rate.
	if p.next.Before(now.Add(-maxLag)) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	if d := time.Until(p.next); d > 0 {
		time.Sleep(d)
	}
}

// countingWriter adds the body bytes it writes to served, and to its
// client's own count.
type countingWriter struct {
	http.ResponseWriter
	served *atomic.Int64
	client *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.served.Add(int64(n))
	w.client.Add(int64(n))
	return n, err
}

// clients counts body bytes per client IP address: a fan-out benchmark
// (issue 18) must show which nodes read the origin and how
// much, not only the total, to tell one read per fabric from twelve.
type clients struct {
	mu sync.Mutex
	by map[string]*atomic.Int64
}

func (c *clients) of(remoteAddr string) *atomic.Int64 {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.by[host]
	if n == nil {
		n = new(atomic.Int64)
		c.by[host] = n
	}
	return n
}

// write prints "ADDRESS BYTES" per client, sorted by address.
func (c *clients) write(w http.ResponseWriter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hosts := make([]string, 0, len(c.by))
	for h := range c.by {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		fmt.Fprintf(w, "%s %d\n", h, c.by[h].Load())
	}
}

type pacedWriter struct {
	http.ResponseWriter
	p *pacer
}

func (w pacedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), 64<<10)
		w.p.wait(n)
		m, err := w.ResponseWriter.Write(b[:n])
		written += m
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func main() {
	file := flag.String("file", "", "the file to serve (required)")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	capMB := flag.Float64("cap", 0, "per-connection cap in MB/s (10^6 bytes); 0: none")
	addrFile := flag.String("addr-file", "", "write the listening address here once ready")
	logReqs := flag.Bool("log", false, "log each request (method, path, Range) on stderr, for tests that check what was asked; off when benchmarking")
	flag.Parse()
	if *file == "" {
		log.Fatal("origin: --file is required")
	}
	fh, err := os.Open(*file)
	if err != nil {
		log.Fatal(err)
	}
	st, err := fh.Stat()
	if err != nil {
		log.Fatal(err)
	}
	fh.Close()
	name := "/" + filepath.Base(*file)
	// Body bytes written, for the resume benchmark: GET /_served answers
	// the total, so a script can see how much a kill cost.
	var served atomic.Int64
	// GET /_clients answers the body bytes per client address.
	perClient := &clients{by: map[string]*atomic.Int64{}}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if *capMB <= 0 {
				return ctx
			}
			return context.WithValue(ctx, connKey{}, &pacer{rate: *capMB * 1e6})
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if *logReqs {
				log.Printf("%s %s range=%q", r.Method, r.URL.Path, r.Header.Get("Range"))
			}
			if r.URL.Path == "/_served" {
				fmt.Fprintln(w, served.Load())
				return
			}
			if r.URL.Path == "/_clients" {
				perClient.write(w)
				return
			}
			if r.URL.Path != name {
				http.NotFound(w, r)
				return
			}
			w = countingWriter{w, &served, perClient.of(r.RemoteAddr)}
			if p, ok := r.Context().Value(connKey{}).(*pacer); ok {
				w = pacedWriter{w, p}
			}
			// ServeContent answers Range and If-Range; the ETag makes the
			// file's version checkable the way a real origin's is.
			w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, st.ModTime().UnixNano(), st.Size()))
			// A descriptor per request: ServeContent seeks, and concurrent
			// ranges on one shared descriptor would read each other's bytes.
			f, err := os.Open(*file)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer f.Close()
			http.ServeContent(w, r, name, st.ModTime(), f)
		}),
	}
	// HTTP/1.1 only: one TCP connection per concurrent request, like the
	// origins being modelled.
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	addr := "http://" + ln.Addr().String() + name
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(addr+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(addr)
	log.Fatal(srv.Serve(ln))
}
