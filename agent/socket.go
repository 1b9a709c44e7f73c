package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Pacing of the ensure stream. progressEvery keeps a hook's log readable
// and the socket quiet however often the fetcher reports; keepaliveEvery
// repeats the last figure during a stall, so a hook can tell an agent that
// is waiting on a slow origin from one that has hung.
const (
	progressEvery  = 250 * time.Millisecond
	keepaliveEvery = 5 * time.Second
)

// maxEnsureBody bounds an ensure request: a source and a digest, or a Hub
// model's list of at most catalog.MaxHubFiles files.
const maxEnsureBody = 4 << 20

// listenSocket binds the agent's unix socket, mode 0600 in a directory
// created 0755 if missing; an existing directory must be root's and
// writable by nobody else (api.CheckSocketDir).
//
// The socket is bound in a private directory beside path, restricted, then
// renamed into place, so there is no moment at which anyone but root could
// connect, whatever the umask. A
// socket file already at path is removed only if nothing answers on it: an
// agent that is running keeps its socket, and this one stops with an error
// instead of silently taking the hooks away from it.
func listenSocket(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// The root hooks trust whatever answers on this path; in a directory
	// others may write, it could be replaced under the agent.
	if err := api.CheckSocketDir(path); err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: the path exists and is not a socket; remove it or choose another --socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another agent is serving it; stop that one first (systemctl stop llmgw-agent)", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
		}
	}
	// Bound inside a private directory (MkdirTemp makes it 0700), so that
	// whatever the umask gives the fresh socket, nobody else can reach it
	// before the chmod; then renamed into place.
	priv, err := os.MkdirTemp(filepath.Dir(path), ".sock")
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// handler is the local API (see package api for the protocol).
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /"+api.Version+"/ensure", a.serveEnsure)
	mux.HandleFunc("GET /"+api.Version+"/status", a.serveStatus)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeNotFound, "no such endpoint %s %s; the agent answers POST /v1/ensure and GET /v1/status", r.Method, r.URL.Path))
	})
	return mux
}

func writeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(api.HTTPStatus(e.Code))
	json.NewEncoder(w).Encode(e)
}

// decodeEnsure reads and checks an ensure request. Strict: an unknown field
// is a hook newer than this agent, which is better said than ignored.
func decodeEnsure(r io.Reader) (api.EnsureRequest, *api.Error) {
	var req api.EnsureRequest
	dec := json.NewDecoder(io.LimitReader(r, maxEnsureBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, api.Errorf(api.CodeInvalid, "ensure request: %v", err)
	}
	switch {
	case strings.TrimSpace(req.Source) == "":
		return req, api.Errorf(api.CodeInvalid, "ensure request: source is empty")
	case req.SHA256 != "" && !catalog.ValidSHA256(req.SHA256):
		return req, api.Errorf(api.CodeInvalid, "ensure request: sha256 %q is not 64 hex digits", req.SHA256)
	case req.Size < 0:
		return req, api.Errorf(api.CodeInvalid, "ensure request: size %d is negative", req.Size)
	case req.Set != "" && !catalog.IsSetName(req.Set):
		return req, api.Errorf(api.CodeInvalid, "ensure request: set %q is not a set directory's name", req.Set)
	case req.Hub != nil && req.Set != "":
		return req, api.Errorf(api.CodeInvalid, "ensure request: a Hub model is not a set")
	}
	if req.Hub != nil {
		if err := catalog.CheckHub(*req.Hub); err != nil {
			return req, api.Errorf(api.CodeInvalid, "ensure request: %v", err)
		}
		if want := catalog.HubSource(req.Hub.Repo, req.Hub.Commit); req.Source != want {
			return req, api.Errorf(api.CodeInvalid, "ensure request: source %q is not the Hub model's, %s", req.Source, want)
		}
	}
	return req, nil
}

// serveEnsure runs one ensure and streams its progress. The request's
// context ends when the hook hangs up or the agent stops; the hook then
// stops waiting, and the fetch stops once no hook waits for it (its bytes
// stay in the .part for the next attempt).
func (a *Agent) serveEnsure(w http.ResponseWriter, r *http.Request) {
	req, aerr := decodeEnsure(r.Body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx := r.Context()
	log := a.log.WithField("source", req.Source)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(ev api.EnsureEvent) bool {
		if err := enc.Encode(ev); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	sub := newSubscriber()
	type result struct {
		path string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := a.ensure(ctx, req, sub)
		done <- result{p, err}
	}()

	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	var last api.Fetch
	var lastSent time.Time
	for {
		select {
		case res := <-done:
			// Whatever progress is pending goes first, so a hook always
			// sees the final byte count before the path.
			if f, ok := sub.take(); ok {
				send(api.EnsureEvent{Progress: &f})
			}
			if res.err != nil {
				e := ensureError(ctx, res.err)
				log.WithError(res.err).Info("ensure failed")
				send(api.EnsureEvent{Error: e})
				return
			}
			send(api.EnsureEvent{Path: res.path})
			return
		case <-sub.notify:
			if wait := progressEvery - time.Since(lastSent); wait > 0 {
				// Coalesce: whatever arrives meanwhile is sent as one figure.
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
				select {
				case sub.notify <- struct{}{}:
				default:
				}
				continue
			}
			f, ok := sub.take()
			if !ok {
				continue
			}
			last = f
			lastSent = time.Now()
			if !send(api.EnsureEvent{Progress: &f}) {
				// The hook has gone; ctx ends and ensure returns shortly.
				continue
			}
		case <-keepalive.C:
			if !lastSent.IsZero() && time.Since(lastSent) >= keepaliveEvery {
				last.Rate = 0
				lastSent = time.Now()
				send(api.EnsureEvent{Progress: &last})
			}
		}
	}
}

func (a *Agent) serveStatus(w http.ResponseWriter, _ *http.Request) {
	st := a.Status()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(st)
}

// serveSocket serves the local API on l until ctx ends, then waits (up to
// shutdownWait) for open ensures to notice and return.
func (a *Agent) serveSocket(ctx context.Context, l net.Listener, path string) error {
	srv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Handlers inherit ctx: stopping the agent ends every ensure, which
		// lets each fetch stop and keep its .part.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    nil,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		os.Remove(path)
		return fmt.Errorf("socket %s: %w", path, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	err := srv.Shutdown(sctx)
	os.Remove(path)
	if err != nil {
		return fmt.Errorf("socket %s: shutting down: %w", path, err)
	}
	return nil
}

// shutdownWait bounds how long a stopping agent waits for ensures to end.
const shutdownWait = 10 * time.Second
