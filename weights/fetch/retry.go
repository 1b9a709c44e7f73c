package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// The HTTP side of a download: one range request, retried after the
// failures that asking again can cure, and watched so that a connection
// that stops delivering is dropped instead of waited on forever.

// errIdle is a connection that delivered nothing for IdleTimeout.
type errIdle time.Duration

func (e errIdle) Error() string {
	return fmt.Sprintf("no data received for %s", time.Duration(e))
}

// errSlow is a connection that delivered less than MinSpeed over a window
// of IdleTimeout: not idle, but not worth keeping either.
type errSlow struct {
	got    int64
	window time.Duration
	min    int64
}

func (e errSlow) Error() string {
	return fmt.Sprintf("the connection delivered %d bytes in %s, below the minimum of %d bytes/s (fetch_min_speed)", e.got, e.window, e.min)
}

// statusError is an HTTP answer that is not the file.
type statusError struct {
	url        string
	code       int
	status     string
	hint       string
	retryAfter time.Duration
}

func (e *statusError) Error() string {
	if e.url == "" {
		return e.status + e.hint
	}
	return "GET " + e.url + ": " + e.status + e.hint
}

// body is an open response whose reads are watched: no byte for IdleTimeout
// cancels the request, and the read error then says so.
type body struct {
	resp   *http.Response
	cancel context.CancelFunc
	timer  *time.Timer
	idle   time.Duration
	idled  atomic.Bool
	once   sync.Once

	// The speed check: every idle window, a body that received fewer than
	// minSpeed bytes a second over it is canceled and reads as errSlow.
	minSpeed  int64
	got       atomic.Int64
	speedMu   sync.Mutex
	speed     *time.Timer
	closed    bool // under speedMu: Close ran, the speed timer stays stopped
	slow      atomic.Pointer[errSlow]
	lastCheck int64 // got at the last check; touched only by the timer
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.resp.Body.Read(p)
	if n > 0 {
		b.timer.Reset(b.idle)
		b.got.Add(int64(n))
	}
	if err != nil && err != io.EOF {
		if s := b.slow.Load(); s != nil {
			err = *s
		} else if b.idled.Load() {
			err = errIdle(b.idle)
		}
	}
	return n, err
}

// watchSpeed starts the speed check, when there is a minimum.
func (b *body) watchSpeed() {
	if b.minSpeed <= 0 {
		return
	}
	b.speedMu.Lock()
	defer b.speedMu.Unlock()
	b.speed = time.AfterFunc(b.idle, b.checkSpeed)
}

func (b *body) checkSpeed() {
	got := b.got.Load()
	// Nothing at all is the idle timer's to report, as such.
	if d := got - b.lastCheck; d > 0 && d < int64(float64(b.minSpeed)*b.idle.Seconds()) {
		b.slow.Store(&errSlow{got: d, window: b.idle, min: b.minSpeed})
		b.cancel()
		return
	}
	b.lastCheck = got
	b.speedMu.Lock()
	defer b.speedMu.Unlock()
	// A check that fired as Close stopped the timer must not re-arm it:
	// the timer would fire every idle window for ever, and its closure
	// would keep the response alive in the long-running agent.
	if !b.closed {
		b.speed.Reset(b.idle)
	}
}

func (b *body) Close() {
	b.once.Do(func() {
		b.speedMu.Lock()
		b.closed = true
		if b.speed != nil {
			b.speed.Stop()
		}
		b.speedMu.Unlock()
		b.timer.Stop()
		b.resp.Body.Close()
		b.cancel()
	})
}

// open sends one GET for bytes from-to (to < 0: to the end) with If-Range
// when validator is set, retrying network errors, 5xx and 429 with backoff.
// It returns a 200 or 206 response; any other answer is an error.
func (d *download) open(ctx context.Context, from, to int64, validator string) (*body, error) {
	for retry := 0; ; {
		b, err := d.openOnce(ctx, from, to, validator)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !retryable(err) {
			return nil, err
		}
		if retry++; retry > d.f.retries() {
			return nil, err
		}
		var se *statusError
		after := time.Duration(0)
		if errors.As(err, &se) {
			after = se.retryAfter
		}
		if err := d.sleep(ctx, retry, after, err); err != nil {
			return nil, err
		}
	}
}

func (d *download) openOnce(ctx context.Context, from, to int64, validator string) (*body, error) {
	rctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, d.rem.url, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	rng := "bytes=" + strconv.FormatInt(from, 10) + "-"
	if to >= 0 {
		rng += strconv.FormatInt(to, 10)
	}
	req.Header.Set("Range", rng)
	if validator != "" {
		req.Header.Set("If-Range", validator)
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "llmgw")
	if d.token != "" && req.URL.Host == d.rem.hubHost {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	b := &body{cancel: cancel, idle: d.f.idleTimeout()}
	// The timer covers the wait for headers too, so a custom Client without
	// ResponseHeaderTimeout still cannot hang on a silent server.
	b.timer = time.AfterFunc(b.idle, func() { b.idled.Store(true); cancel() })
	resp, err := d.client().Do(req)
	if err != nil {
		b.timer.Stop()
		cancel()
		if b.idled.Load() && ctx.Err() == nil {
			return nil, errIdle(b.idle)
		}
		return nil, err
	}
	b.resp = resp
	b.minSpeed = d.f.minSpeed()
	b.watchSpeed()
	// Accept-Encoding: identity asked for the stored bytes; an encoded body
	// is not them, and its length and ranges are of something else.
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		b.Close()
		return nil, fmt.Errorf("the origin answered with Content-Encoding: %s although asked for identity; "+
			"its bytes are not the file's. Serve the file without encoding (e.g. exclude it from the server's gzip)", ce)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		se := &statusError{code: resp.StatusCode, status: resp.Status, hint: hintFor(d.rem, resp.StatusCode, req.Header.Get("Authorization") != "", hubErrorCode(resp))}
		if m := hubErrorMessage(resp); m != "" {
			se.status += " (" + m + ")"
		}
		if d.rem.url != d.rem.source {
			se.url = d.rem.url // what hf: resolved to, worth seeing
		}
		if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			b.Close()
			return nil, fmt.Errorf("%w: %v", errRestart, se)
		}
		se.retryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		b.Close()
		return nil, se
	}
	return b, nil
}

// client is the Fetcher's client with one redirect rule added: the token
// does not follow a redirect to another scheme, host or port
// (StripCredentials). A shallow copy, so the configured client is not
// changed and its transport and its own redirect policy still apply.
func (d *download) client() *http.Client {
	base := d.f.client()
	if d.hc != nil {
		base = d.hc
	}
	c := *base
	policy := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if StripCredentials(via[0].URL, req.URL) {
			req.Header.Del("Authorization")
		}
		if policy != nil {
			return policy(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// retryable reports whether asking again might work: the network, a server
// error, a rate limit, a stalled connection. A 404, a redirect loop or a bad
// certificate will answer the same way every time.
func retryable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code >= 500 || se.code == http.StatusTooManyRequests || se.code == http.StatusRequestTimeout
	}
	var idle errIdle
	var slow errSlow
	if errors.As(err, &idle) || errors.As(err, &slow) {
		return true
	}
	// *url.Error is itself a net.Error, whatever it wraps (a redirect loop
	// included), so judge what it wraps.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// sleep waits before retry number n: after if the server said (Retry-After),
// else RetryWait doubling per retry, capped.
func (d *download) sleep(ctx context.Context, n int, after time.Duration, cause error) error {
	if after > maxRetryAfter {
		// Retrying sooner than the origin asked is what gets a node's
		// address blocked, and sleeping as long as it asked would hold a
		// Prolog, or an agent's fetch that no deadline ends, for hours on a
		// server that said it is down. Saying so now lets the job fail with
		// the reason and a later job try again.
		return fmt.Errorf("the origin asked to wait %s before retrying (Retry-After), longer than the %s a fetch waits; try again later: %w", after.Round(time.Second), maxRetryAfter, cause)
	}
	wait := after
	if wait <= 0 {
		wait = d.f.retryWait() << min(n-1, 16)
		wait = min(wait, maxRetryWait)
	}
	d.log.WithError(cause).WithFields(logrus.Fields{"retry": n, "wait": wait}).Warn("retrying")
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ParseRetryAfter reads Retry-After as seconds or an HTTP date; 0 if absent.
// weights/hub's Hub client reads it the same way.
func ParseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
