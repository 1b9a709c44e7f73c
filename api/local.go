package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The agent's local API: HTTP over a unix socket that only root can open.
// A process on the node uses it to have the agent make weights present, so
// that every job on a node waiting for one source shares one fetch, and to
// read what the agent knows.
//
//	POST /v1/ensure  EnsureRequest → 200 and a stream of EnsureEvent, one
//	                 JSON object per line: progress events, then exactly one
//	                 with Path or Error. A request the agent refuses outright
//	                 is answered with a non-2xx status and an Error body.
//	GET  /v1/status  → AgentStatus
//
// HTTP, rather than a bespoke framing, because curl --unix-socket can then
// show an operator what a client sees.

// DefaultSocket is where the agent listens.
const DefaultSocket = "/run/llmgw/agent.sock"

// EnsureRequest asks the agent to make a source present on this node.
type EnsureRequest struct {
	// Source is a catalog source: a path (checked, never fetched), an
	// hf:org/repo/file or http(s) URL (fetched into the cache), or a bare
	// model id (passed through).
	Source string `json:"source"`
	// SHA256, when set, is checked against the fetched file before it is
	// given its final name.
	SHA256 string `json:"sha256,omitempty"`
	// Size, when set, is the expected size in bytes.
	Size int64 `json:"size_bytes,omitempty"`
	// Set, when set, names the set directory (catalog.SetName) of a model
	// of several files: the source is fetched into it under its own file
	// name, beside the set's other files. An agent older than this field
	// refuses the request (it decodes strictly) rather than fetch the file
	// where no engine would find its siblings.
	Set string `json:"set,omitempty"`
	// Hub, when set, asks for a Hugging Face repository at one commit
	// (catalog.Hub): every file of it in the node's Hugging Face cache, in
	// huggingface_hub's layout (weights/fetch/hub.go), and the answer's
	// path is the snapshot directory. Source is then the model's source,
	// catalog.HubSource. An agent older than this field refuses the
	// request (it decodes strictly), and the Prolog then fetches in its
	// own process.
	Hub *catalog.Hub `json:"hub,omitempty"`
}

// EnsureEvent is one line of the answer to an ensure. Exactly one field is
// set; the last line carries Path or Error.
type EnsureEvent struct {
	Progress *Fetch `json:"progress,omitempty"`
	Path     string `json:"path,omitempty"`
	Error    *Error `json:"error,omitempty"`
}

// AgentStatus is what the agent knows, as GET /v1/status answers it.
type AgentStatus struct {
	Node         string    `json:"node"`
	Fabric       string    `json:"fabric"`
	AgentVersion string    `json:"agent_version"`
	Started      time.Time `json:"started"`
	// Coordinator is empty when the agent reports to nobody.
	Coordinator string   `json:"coordinator,omitempty"`
	WeightDirs  []string `json:"weight_dirs"`
	CacheDir    string   `json:"cache_dir"`
	// LastScan is when the weight directories were last scanned, and
	// ScanTook how long that took.
	LastScan time.Time     `json:"last_scan,omitzero"`
	ScanTook time.Duration `json:"scan_took_ns"`
	// Report is the newest report the agent built, whether or not it was
	// delivered; LastReport says what became of it.
	Report     *Report      `json:"report,omitempty"`
	LastReport ReportResult `json:"last_report"`
	// Catalog is the state of the node-local catalog copy.
	Catalog CatalogStatus `json:"catalog"`
	// PeerAddr is the node's chunk server address (peer_addr or
	// peer_interface), "" when it serves no peers; PeerServerError, when
	// set, is why it does not serve there now (another process holds the
	// address: the agent fetches from the origin and tries again).
	// Added with issue 24.
	PeerAddr        string `json:"peer_addr,omitempty"`
	PeerServerError string `json:"peer_server_error,omitempty"`
	// Prefetches are the prefetches the coordinator asked of this node
	// (issue 28), with what became of them.
	Prefetches []PrefetchState `json:"prefetches,omitempty"`
}

// ReportResult is the outcome of the agent's newest attempt to report.
type ReportResult struct {
	Time time.Time `json:"time,omitzero"`
	Seq  int64     `json:"seq,omitempty"`
	OK   bool      `json:"ok"`
	// Error is why the attempt failed; empty on success or before any.
	Error string `json:"error,omitempty"`
	// LastOK is when a report was last accepted.
	LastOK time.Time `json:"last_ok,omitzero"`
	// NextAttempt is when the agent will try again.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
}

// CatalogStatus says how fresh the node-local catalog copy is.
type CatalogStatus struct {
	Path string `json:"path"`
	// Fetched is when the copy was last read from the coordinator;
	// Checked when the coordinator last said, in its answer to a report,
	// that the copy is its catalog (the copy is read again only when the
	// catalog changed).
	Fetched time.Time `json:"fetched,omitzero"`
	Checked time.Time `json:"checked,omitzero"`
	Models  int       `json:"models"`
	Error   string    `json:"error,omitempty"`
	// GCHeld says why gc removes nothing on this node (the catalog is not
	// the one it trusts), since GCHeldSince; empty while it trusts it.
	GCHeld      string    `json:"gc_held,omitempty"`
	GCHeldSince time.Time `json:"gc_held_since,omitzero"`
}

// ErrNoAgent reports that nothing answered on the agent's socket: the agent
// is not installed, not running, or restarting. Test for it with errors.Is.
// A caller that gets it can make the weights present itself with a
// fetch.Fetcher, whose node lock keeps it from duplicating a fetch the agent
// has under way, or say that the agent is down. Any other error means the
// agent was reached and answered.
var ErrNoAgent = errors.New("no agent answering")

// LocalClient speaks to the agent over its unix socket.
type LocalClient struct {
	// Socket is the agent's socket (default DefaultSocket).
	Socket string
	// HTTP is the client used (default: one that dials Socket). It carries
	// no overall timeout: an ensure lasts as long as its fetch, and is bounded
	// by the context given to it.
	HTTP *http.Client
}

func (c *LocalClient) socket() string {
	if c.Socket == "" {
		return DefaultSocket
	}
	return c.Socket
}

func (c *LocalClient) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	sock := c.socket()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialAgent(ctx, sock)
		},
		// One request at a time per hook; nothing to keep warm.
		DisableKeepAlives: true,
	}}
}

// do sends a request to the agent; the host part of the URL is ignored by
// the dialer.
func (c *LocalClient) do(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent %s: %w", c.socket(), ctx.Err())
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("agent %s: %w: %w", c.socket(), ErrNoAgent, op.Err)
		}
		return nil, fmt.Errorf("agent %s: %w", c.socket(), err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, errorFrom(resp.StatusCode, b, fmt.Sprintf("agent %s: %s %s", c.socket(), method, path))
	}
	return resp, nil
}

// Ensure asks the agent to make req.Source present and returns its local
// path. onProgress, when non-nil, is called with each progress event (a few per
// second at most). An *Error with CodeUnavailable means the agent is
// stopping (a restart, an upgrade) and the caller should do what it does
// for ErrNoAgent; any other *Error means the agent tried and failed, and
// fetching again without it would fail the same way.
func (c *LocalClient) Ensure(ctx context.Context, req EnsureRequest, onProgress func(Fetch)) (string, error) {
	resp, err := c.do(ctx, http.MethodPost, "/"+Version+"/ensure", req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ev EnsureEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return "", fmt.Errorf("agent %s: ensure %s: bad event %q: %w", c.socket(), req.Source, truncate(string(line), 100), err)
		}
		switch {
		case ev.Error != nil:
			return "", ev.Error
		case ev.Path != "":
			if !filepath.IsAbs(ev.Path) && ev.Path != req.Source {
				return "", fmt.Errorf("agent %s: ensure %s: answered with relative path %q", c.socket(), req.Source, ev.Path)
			}
			return ev.Path, nil
		case ev.Progress != nil && onProgress != nil:
			onProgress(*ev.Progress)
		}
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("agent %s: ensure %s: %w", c.socket(), req.Source, ctx.Err())
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return "", fmt.Errorf("agent %s: ensure %s: answer ended without a result (agent stopped?): %w", c.socket(), req.Source, err)
}

// Status returns what the agent knows.
func (c *LocalClient) Status(ctx context.Context) (AgentStatus, error) {
	var st AgentStatus
	resp, err := c.do(ctx, http.MethodGet, "/"+Version+"/status", nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(&st); err != nil {
		return st, fmt.Errorf("agent %s: status: %w", c.socket(), err)
	}
	return st, nil
}
