package swarmtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
)

// ErrNotServed is a SlowRead's error when the chunk server refused the
// request.
var ErrNotServed = errors.New("not served")

// SlowRead is what became of one of SlowReads' requests.
type SlowRead struct {
	Status int           // the chunk server's answer, 0 when none came
	Read   int64         // body bytes read
	Held   time.Duration // from the request until the server closed the connection, or ctx ended
	Err    error         // why the read ended
}

// SlowReads opens n requests at once for bytes from..to of file sum on the
// chunk server at addr, as node of fabric with codec's credentials (a
// member's requests, exactly), and reads each answer's body at rate bytes a
// second through a 4 KiB receive buffer, so that the server's writes block
// as they would for a reader that reads nothing, until the server closes
// the connection or ctx ends. It returns when every request has ended.
func SlowReads(ctx context.Context, codec munge.Codec, node, fabric, addr, sum string, from, to int64, n int, rate int64) []SlowRead {
	out := make([]SlowRead, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = slowRead(ctx, codec, node, fabric, addr, sum, from, to, rate) })
	}
	wg.Wait()
	return out
}

func slowRead(ctx context.Context, codec munge.Codec, node, fabric, addr, sum string, from, to int64, rate int64) SlowRead {
	start := time.Now()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		// Set before connecting, so that the window it advertises is
		// small from the start.
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return SlowRead{Err: err}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	uri := "/" + api.Version + "/chunks/" + sum
	rng := fmt.Sprintf("bytes=%d-%d", from, to)
	cred, err := codec.Encode(ctx, api.PeerMungePayload(http.MethodGet, addr, uri, node, fabric, rng))
	if err != nil {
		return SlowRead{Err: err}
	}
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nRange: %s\r\n%s: %s\r\n%s: %s\r\nAuthorization: %s %s\r\n\r\n",
		uri, addr, rng, api.PeerNodeHeader, node, api.PeerFabricHeader, fabric, api.MungeScheme, cred)
	if _, err := io.WriteString(conn, req); err != nil {
		return SlowRead{Err: err}
	}
	br := bufio.NewReaderSize(conn, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return SlowRead{Err: err, Held: time.Since(start)}
	}
	res := SlowRead{Status: resp.StatusCode}
	if resp.StatusCode != http.StatusPartialContent {
		resp.Body.Close()
		res.Err, res.Held = ErrNotServed, time.Since(start)
		return res
	}
	// A few bytes at a time, paced to rate.
	piece := max(1, min(rate/10, 512))
	buf := make([]byte, piece)
	for {
		m, err := resp.Body.Read(buf)
		res.Read += int64(m)
		if err != nil {
			res.Err, res.Held = err, time.Since(start)
			if ctx.Err() != nil {
				res.Err = ctx.Err()
			}
			return res
		}
		wait := time.Duration(int64(m) * int64(time.Second) / max(rate, 1))
		select {
		case <-ctx.Done():
			res.Err, res.Held = ctx.Err(), time.Since(start)
			return res
		case <-time.After(wait):
		}
	}
}
