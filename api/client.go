package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Client speaks to the coordinator's HTTP API.
type Client struct {
	// BaseURL is the coordinator, e.g. "http://coord:8420". Required.
	BaseURL string
	// Token is sent as a bearer token when set and Auth is not.
	Token string
	// Auth, when set, authenticates each request (a MUNGE credential:
	// api/munge.Authenticator) instead of Token.
	Auth Authenticator
	// HTTP is the client used (default: one with a 30 s timeout).
	HTTP *http.Client
	// UserAgent identifies the caller in the coordinator's logs.
	UserAgent string
	// TLSCA is a PEM file of the CA that signed the coordinator's
	// certificate (default $LLMGW_TLS_CA). With one, only an https://
	// coordinator with a certificate it signed is spoken to (see
	// httpClient); ignored when HTTP is set.
	TLSCA string
}

// longCall, a context key, carries a longer timeout for one call than the
// client's own (a feature sync of thousands of nodes takes longer than the
// 30 s an ordinary request gets).
type longCall struct{}

// ReadToken reads a bearer token from a file, trimming surrounding space.
// A file others may read is refused (CheckPrivate).
// An empty file is an error: a token that is silently empty would turn every
// write into a confusing 401.
func ReadToken(path string) (string, error) {
	if err := CheckPrivate("token file", path); err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// PostReport sends a node report (agent token). The agent reports through
// it, and the coordinator's tests and benchmarks play agents with it.
//
// The answer must be empty or JSON: a 200 from something that is not the
// coordinator (a login page, a wrong port) is a failure, not a report
// delivered.
func (c *Client) PostReport(ctx context.Context, r *Report) (ReportAnswer, error) {
	var ans ReportAnswer
	err := c.Do(ctx, http.MethodPost, "/"+Version+"/reports", r, &ans)
	return ans, err
}

// Models returns the catalog.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var out Models
	if err := c.Do(ctx, http.MethodGet, "/v1/models", nil, &out); err != nil {
		return nil, err
	}
	return out.Models, nil
}

// Catalog returns the catalog with its identity and generation.
func (c *Client) Catalog(ctx context.Context) (Models, error) {
	var out Models
	err := c.Do(ctx, http.MethodGet, "/v1/models", nil, &out)
	return out, err
}

// PutModel adds or replaces a catalog entry (admin token).
func (c *Client) PutModel(ctx context.Context, m Model) (Model, error) {
	var out Model
	err := c.Do(ctx, http.MethodPut, "/v1/models/"+url.PathEscape(m.Name), m, &out)
	return out, err
}

// DeleteModel removes a catalog entry (admin token).
func (c *Client) DeleteModel(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/models/"+url.PathEscape(name), nil, nil)
}

// RenameModel gives the catalog entry old the name new (admin): its
// sources, pins and holders follow it, and no node ever sees its files
// unwanted.
func (c *Client) RenameModel(ctx context.Context, old, new string) (Model, error) {
	var m Model
	err := c.Do(ctx, http.MethodPost, "/v1/models/"+url.PathEscape(old)+"/rename", ModelRename{Name: new}, &m)
	return m, err
}

// ModelRename is the body of POST /v1/models/{name}/rename.
type ModelRename struct {
	Name string `json:"name"`
}

// DeleteNode makes the coordinator forget a node (admin).
func (c *Client) DeleteNode(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/v1/nodes/"+url.PathEscape(name), nil, nil)
}

// NewNodeToken makes a node's own token, revoking its old one (admin).
func (c *Client) NewNodeToken(ctx context.Context, node string) (NodeToken, error) {
	var out NodeToken
	err := c.Do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/token", nil, &out)
	return out, err
}

// maxResponse bounds what a client reads from the coordinator; a status over
// ten thousand nodes is a few megabytes.
const maxResponse = 256 << 20

// Do sends one request with a JSON body (when in is non-nil) and decodes a
// JSON answer into out (when non-nil). A non-2xx answer becomes an *Error.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	if c.BaseURL == "" {
		return fmt.Errorf("no coordinator configured: pass --coordinator URL or set LLMGW_COORDINATOR")
	}
	var body io.Reader
	var raw []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		raw = b
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("coordinator URL %q: %w", c.BaseURL, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.Auth != nil:
		h, err := c.Auth.Authorization(ctx, method, req.URL.RequestURI(), raw)
		if err != nil {
			return fmt.Errorf("authenticating %s %s: %w", method, path, err)
		}
		req.Header.Set("Authorization", h)
	case c.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	if d, ok := ctx.Value(longCall{}).(time.Duration); ok && hc.Timeout > 0 && hc.Timeout < d {
		long := *hc
		long.Timeout = d
		hc = &long
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("coordinator %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("coordinator %s: reading answer to %s %s: %w", c.BaseURL, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp.StatusCode, b, method+" "+path)
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("coordinator %s: answer to %s %s is not the JSON expected: %w", c.BaseURL, method, path, err)
	}
	return nil
}

// errorFrom is the *Error a non-2xx answer carries. An answer that is not
// one of ours (a proxy's error page, a bare status) still becomes an *Error,
// coded internal and quoting the start of the body, with what (the request)
// in front so the message says where it came from.
func errorFrom(status int, body []byte, what string) *Error {
	e := &Error{Status: status}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		e.Code = CodeInternal
		e.Message = fmt.Sprintf("%s: %s", what, strings.TrimSpace(truncate(string(body), 200)))
	}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
