package agent

// The lease holder's origin read of a revision: one body for a run of
// chunks, made of each file's range asked of that file's origin (the Hub's
// resolve URL at the commit, its redirect to the CDN, a set file's URL), in
// order, with the next file's request sent before the current one ends so
// that the uplink does not idle at a file boundary for a request's round
// trip (and, for the Hub, its redirect). The bytes of a file this node holds
// already are read from disk: a chunk that spans it and a file the fabric
// lacks costs the origin only the part it lacks.

import (
	"context"
	"io"
	"net/http"
	"time"
)

// prefetchFloor is the least of what is left of a file's range when the
// next file's request goes out. More is left when the current range came
// at a rate that would bring more in twice the time its request took to
// be answered (a round trip, and the Hub's redirect): the next answer is
// then there when it is needed, and its bytes do not pile up in a socket
// buffer ahead of their turn (lost, if the read breaks).
const prefetchFloor = 64 << 10

// originGet is the swarm's originGet for a revision: a body of its bytes
// from..to. The first file's request is sent here, so that a refusal (a
// gated repository, another commit) fails the run at once.
func (r *revision) originGet(ctx context.Context, from, to int64) (*http.Response, string, error) {
	b := &revBody{ctx: ctx}
	r.each(from, to-from+1, func(f *revFile, at, _, m int64) error {
		b.segs = append(b.segs, revSeg{f: f, at: at, n: m})
		return nil
	})
	if err := b.advance(); err != nil {
		b.Close()
		return nil, "", err
	}
	return &http.Response{StatusCode: http.StatusPartialContent, Header: http.Header{}, Body: b}, "", nil
}

// revSeg is one file's part of an origin read.
type revSeg struct {
	f     *revFile
	at, n int64
}

// opened is a segment's body as its request came back.
type opened struct {
	body  io.ReadCloser
	err   error
	setup time.Duration
}

// revBody is a revision's origin read: its segments one after another.
type revBody struct {
	ctx   context.Context
	segs  []revSeg
	k     int           // the segment being read
	cur   io.ReadCloser // its body, nil before it is opened
	local bool          // cur is read from this node's disk
	left  int64         // its bytes still to read
	// setup is how long the current range's request took to be answered,
	// and began when it was; rate is the bytes a second the ranges have
	// come at so far.
	setup time.Duration
	began time.Time
	rate  float64
	// next is the next origin segment's request, sent ahead (nextAt is
	// its index), nil while none is.
	next   chan opened
	nextAt int
	count  func(int)
}

// counting has the body count its origin bytes (not those read from disk)
// with count, and returns it.
func (b *revBody) counting(count func(int)) io.Reader {
	b.count = count
	return b
}

// open asks segment k's bytes of its file's origin, or reads them from
// disk when the file is held here.
func (b *revBody) open(k int) (io.ReadCloser, bool, error) {
	sg := b.segs[k]
	if sg.f.isDone() {
		return io.NopCloser(io.NewSectionReader(sg.f.fh, sg.at, sg.n)), true, nil
	}
	body, err := sg.f.origin.Range(b.ctx, sg.at, sg.at+sg.n-1)
	return body, false, err
}

// advance opens the current segment (b.k), taking the request sent ahead
// for it if there is one.
func (b *revBody) advance() error {
	var o opened
	asked := time.Now()
	if b.next != nil && b.nextAt == b.k {
		o = <-b.next
		b.next = nil
		b.local = false
	} else {
		o.body, b.local, o.err = b.open(b.k)
		o.setup = time.Since(asked)
	}
	if o.err != nil {
		return o.err
	}
	b.cur, b.left, b.setup, b.began = o.body, b.segs[b.k].n, o.setup, time.Now()
	return nil
}

// ahead sends the next origin segment's request when what is left of the
// current one comes within twice its request's setup time at the rate the
// origin sends, or is within prefetchFloor.
func (b *revBody) ahead() {
	k := b.k + 1
	if b.next != nil || k >= len(b.segs) || b.segs[k].f.isDone() {
		return
	}
	if !b.local {
		if el := time.Since(b.began); el > 10*time.Millisecond {
			b.rate = float64(b.segs[b.k].n-b.left) / el.Seconds()
		}
	}
	if b.left > max(prefetchFloor, int64(b.rate*2*b.setup.Seconds())) {
		return
	}
	ch := make(chan opened, 1)
	b.next, b.nextAt = ch, k
	sg := b.segs[k]
	go func() {
		asked := time.Now()
		body, err := sg.f.origin.Range(b.ctx, sg.at, sg.at+sg.n-1)
		ch <- opened{body, err, time.Since(asked)}
	}()
}

func (b *revBody) Read(p []byte) (int, error) {
	for {
		if b.k >= len(b.segs) {
			return 0, io.EOF
		}
		if b.cur == nil {
			if err := b.advance(); err != nil {
				return 0, err
			}
		}
		b.ahead()
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err := b.cur.Read(p)
		b.left -= int64(n)
		if n > 0 && !b.local && b.count != nil {
			b.count(n)
		}
		if b.left == 0 {
			b.cur.Close()
			b.cur = nil
			b.k++
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// Close ends the read, and the request sent ahead if there is one.
func (b *revBody) Close() error {
	if b.cur != nil {
		b.cur.Close()
		b.cur = nil
	}
	if ch := b.next; ch != nil {
		b.next = nil
		go func() {
			if o := <-ch; o.body != nil {
				o.body.Close()
			}
		}()
	}
	return nil
}
