package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// clock is a settable clock for the server, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

var testTokens = Tokens{Admin: "admin-secret", Read: ""}

// nodeAuth plays the agents of many nodes through one client, each with its
// own node's token, made as `llmgw nodes token NODE` makes it: the node is
// read from the request's body (a report's or a gc answer's "node"), so the
// server's real per-node check judges every request. A body naming no node
// is sent without a token.
type nodeAuth struct {
	// mint makes node's token: the server's own function, or the admin
	// API (nodeAuthVia) for a server only reachable over HTTP.
	mint func(ctx context.Context, node string) (string, error)
	mu   sync.Mutex
	toks map[string]string
}

func newNodeAuth(srv *Server) *nodeAuth { return &nodeAuth{mint: srv.newNodeToken} }

// nodeAuthVia mints the tokens through admin, as `llmgw nodes token` does.
func nodeAuthVia(admin *api.Client) *nodeAuth {
	return &nodeAuth{mint: func(ctx context.Context, node string) (string, error) {
		made, err := admin.NewNodeToken(ctx, node)
		return made.Token, err
	}}
}

func (a *nodeAuth) Authorization(ctx context.Context, method, uri string, body []byte) (string, error) {
	var b struct {
		Node string `json:"node"`
	}
	if json.Unmarshal(body, &b) != nil || b.Node == "" {
		return "", nil
	}
	tok, err := a.token(ctx, b.Node)
	return "Bearer " + tok, err
}

// token is node's token, made on first use.
func (a *nodeAuth) token(ctx context.Context, node string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if tok, ok := a.toks[node]; ok {
		return tok, nil
	}
	tok, err := a.mint(ctx, node)
	if err != nil {
		return "", err
	}
	if a.toks == nil {
		a.toks = map[string]string{}
	}
	a.toks[node] = tok
	return tok, nil
}

type testEnv struct {
	srv   *Server
	db    *store.DB
	url   string
	clock *clock
	// agent speaks for every node, each with its own token (nodeAuth).
	agent *api.Client
	admin *api.Client
	anon  *api.Client
}

func (e *testEnv) client(token string) *api.Client {
	return &api.Client{BaseURL: e.url, Token: token}
}

// nodeClient is a client with node's own token, for requests whose body
// names no node (reads), which e.agent sends without one.
func (e *testEnv) nodeClient(t testing.TB, node string) *api.Client {
	t.Helper()
	tok, err := e.agent.Auth.(*nodeAuth).token(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	return e.client(tok)
}

// newEnv starts a coordinator over a real database file behind a real HTTP
// server on 127.0.0.1, driven through the real api.Client.
func newEnv(t testing.TB, cfg Config, tokens Tokens) *testEnv {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(ctx, cfg, tokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: t0}
	srv.now = c.now
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
		db.Close()
	})
	e := &testEnv{srv: srv, db: db, url: ts.URL, clock: c}
	e.agent, e.admin, e.anon = &api.Client{BaseURL: e.url, Auth: newNodeAuth(srv)}, e.client(tokens.Admin), e.client("")
	return e
}

func report(node, fabric string, seq int64, ws ...api.Weight) *api.Report {
	return &api.Report{
		ID: fmt.Sprintf("%s-%d", node, seq), Seq: seq, Started: t0, Time: t0, Node: node, Fabric: fabric,
		Looked: true, Weights: ws, AgentVersion: "test",
		Cache: api.Cache{Dir: "/var/cache/llmgw", FreeBytes: 500e9, TotalBytes: 900e9},
	}
}

func apiCode(err error) (int, string) {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Status, ae.Code
	}
	return 0, ""
}

func TestAuth(t *testing.T) {
	ctx := context.Background()
	const nodeToken = "<n1's own token>"
	model := api.Model{Name: "llama", Source: "/models/llama"}
	for _, tc := range []struct {
		name     string
		tokens   Tokens
		token    string
		write    string // "report" or "catalog"
		wantCode int
	}{
		{"report without token", testTokens, "", "report", 401},
		{"report with wrong token", testTokens, "guess", "report", 401},
		{"report with the node's own token", testTokens, nodeToken, "report", 0},
		// The one agent token every node once shared is no token at all.
		{"report with the old shared agent token", testTokens, "agent-secret", "report", 401},
		{"report with admin token", testTokens, "admin-secret", "report", 0},
		{"report with read token", Tokens{Admin: "b", Read: "r"}, "r", "report", 401},
		{"report, server has no tokens", Tokens{}, "anything", "report", 401},
		{"catalog without token", testTokens, "", "catalog", 401},
		{"catalog with wrong token", testTokens, "admin-secreT", "catalog", 401},
		{"catalog with a node's token", testTokens, nodeToken, "catalog", 401},
		{"catalog, server has no admin token", Tokens{}, "anything", "catalog", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{}, tc.tokens)
			tok := tc.token
			if tok == nodeToken {
				tok = e.nodeClient(t, "n1").Token
			}
			c := e.client(tok)
			var err error
			if tc.write == "report" {
				_, err = c.PostReport(ctx, report("n1", "ib-a", 1, api.Weight{Path: "/models/llama", Complete: true}))
			} else {
				_, err = c.PutModel(ctx, model)
			}
			status, _ := apiCode(err)
			if tc.wantCode == 0 && err != nil || tc.wantCode != 0 && status != tc.wantCode {
				t.Fatalf("write error = %v (status %d), want status %d", err, status, tc.wantCode)
			}
			if tc.wantCode == 0 {
				return
			}
			// A wrong token and a token of the wrong role get one answer:
			// it must not say which role a token has.
			var ae *api.Error
			if strings.Contains(tc.name, "wrong token") || strings.Contains(tc.name, "shared agent token") ||
				tc.name == "report with read token" || tc.name == "catalog with a node's token" {
				if !errors.As(err, &ae) || ae.Message != errDenied.Message {
					t.Errorf("refusal %v, want the one refusal %q", err, errDenied.Message)
				}
			}
			// Nothing changed.
			nodes, _ := e.db.Nodes(ctx)
			models, _ := e.db.Models(ctx)
			if len(nodes) != 0 || len(models) != 0 {
				t.Errorf("after a refused write: %d nodes, %d models stored", len(nodes), len(models))
			}
			if tc.wantCode == 403 && !strings.Contains(err.Error(), "-token-file") {
				t.Errorf("refusal %q does not say how to configure a token", err)
			}
		})
	}
}

// TestAgentTokenFileRefused: a configuration that still names the one agent
// token every node once shared is refused at start, by name, with what
// replaces it; starting without it would leave every agent refused and
// nobody told why.
func TestAgentTokenFileRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tok := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(tok, []byte("agent-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "agent_token_file") || !strings.Contains(err.Error(), tok) ||
			!strings.Contains(err.Error(), "llmgw nodes token NODE") {
			t.Errorf("%s with agent_token_file: %v; want a refusal naming the key, its file and 'llmgw nodes token NODE'", what, err)
		}
	}
	srv, err := New(ctx, Config{AgentTokenFile: tok}, testTokens, db, nil)
	if srv != nil {
		srv.Close()
	}
	check("New", err)
	// Bounded: a Run that took the setting would serve until ctx ends.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	check("Run", Run(rctx, Config{AgentTokenFile: tok, DB: filepath.Join(dir, "run.db"), Listen: "127.0.0.1:0"}, logrus.New()))
	if _, err := os.Stat(filepath.Join(dir, "run.db")); err == nil {
		t.Error("Run created its database before refusing the configuration")
	}
}

func TestReadToken(t *testing.T) {
	ctx := context.Background()
	tokens := Tokens{Admin: "b", Read: "r"}
	e := newEnv(t, Config{}, tokens)
	nodeTok := e.nodeClient(t, "n1").Token
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"wrong", 401}, {"agent-secret", 401}, {"r", 200}, {nodeTok, 200}, {"b", 200}} {
		_, err := e.client(tc.token).Status(ctx)
		status, _ := apiCode(err)
		if err == nil {
			status = 200
		}
		if status != tc.want {
			t.Errorf("status with token %q: %d (%v), want %d", tc.token, status, err, tc.want)
		}
	}
	// Health, readiness and metrics stay open.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(e.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s without a token = %d, want 200", p, resp.StatusCode)
		}
	}
}

// rawPost sends body as a report with the admin token, which may post
// reports: the body need not name a node.
func rawPost(t *testing.T, url string, body io.Reader, contentType string) (int, api.Error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/reports", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testTokens.Admin)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ae api.Error
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		if err := jsonUnmarshal(b, &ae); err != nil || ae.Code == "" || ae.Message == "" {
			t.Errorf("error body %q is not a JSON api.Error", b)
		}
	}
	return resp.StatusCode, ae
}

// endless is an unbounded stream of spaces inside a JSON string, with no
// Content-Length, so only the reading limit can stop it.
type endless struct{ n int64 }

func (r *endless) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.n++
		return copy(p, `{"node":"n1","errors":["`), nil
	}
	for i := range p {
		p[i] = 'x'
	}
	r.n += int64(len(p))
	return len(p), nil
}

func TestBadReports(t *testing.T) {
	e := newEnv(t, Config{}, testTokens)
	many := report("n1", "ib-a", 1)
	for i := range 10000 {
		many.Weights = append(many.Weights, api.Weight{Path: fmt.Sprintf("/m/%d", i), Complete: true})
	}
	for _, tc := range []struct {
		name     string
		body     func() io.Reader
		ctype    string
		wantCode int
		wantText string
	}{
		{"malformed node name", jsonBody(report("n1;rm -rf", "ib-a", 1)), "application/json", 400, "node name"},
		{"empty node name", jsonBody(report("", "ib-a", 1)), "application/json", 400, "node name is empty"},
		{"bad fabric", jsonBody(report("n1", "ib a", 1)), "application/json", 400, "fabric"},
		{"path with NUL", jsonBody(report("n1", "ib-a", 1, api.Weight{Path: "/m/a\x00b"})), "application/json", 400, "NUL"},
		{"relative path", jsonBody(report("n1", "ib-a", 1, api.Weight{Path: "m/a"})), "application/json", 400, "not absolute"},
		{"same path twice", jsonBody(report("n1", "ib-a", 1, api.Weight{Path: "/m/a"}, api.Weight{Path: "/m/a/"})), "application/json", 400, "twice"},
		{"negative size", jsonBody(report("n1", "ib-a", 1, api.Weight{Path: "/m/a", Size: -1})), "application/json", 400, "negative"},
		{"10,000 weights", jsonBody(many), "application/json", 400, "10000 weights"},
		{"100 MB body with length", func() io.Reader { return bytes.NewReader(make([]byte, 100<<20)) }, "application/json", 413, "limit"},
		{"100 MB body streamed", func() io.Reader { return io.LimitReader(&endless{}, 100<<20) }, "application/json", 413, "limit"},
		{"unknown field", strBody(`{"node":"n1","fabric":"ib-a","looked":true,"weigths":[]}`), "application/json", 400, "unknown field"},
		{"two values", strBody(`{"node":"n1"} {"node":"n2"}`), "application/json", 400, "after the JSON value"},
		{"not JSON", strBody(`node=n1`), "application/json", 400, "not the JSON"},
		{"empty body", strBody(``), "application/json", 400, "empty"},
		{"wrong content type", jsonBody(report("n1", "ib-a", 1)), "text/plain", 400, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ae := rawPost(t, e.url, tc.body(), tc.ctype)
			if code != tc.wantCode || !strings.Contains(ae.Message, tc.wantText) {
				t.Errorf("POST = %d %q, want %d with %q", code, ae.Message, tc.wantCode, tc.wantText)
			}
			if nodes, _ := e.db.Nodes(context.Background()); len(nodes) != 0 {
				t.Errorf("a refused report stored %d nodes", len(nodes))
			}
		})
	}
	// And the same server still takes a good one.
	if _, err := e.agent.PostReport(context.Background(), report("n1", "ib-a", 1)); err != nil {
		t.Fatal(err)
	}
}

func TestBadModels(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	for _, tc := range []struct {
		name string
		m    api.Model
		want int
	}{
		{"comma in name", api.Model{Name: "a,b", Source: "/m"}, 400},
		{"name too long", api.Model{Name: strings.Repeat("a", 65), Source: "/m"}, 400},
		{"empty source", api.Model{Name: "a"}, 400},
		{"relative path source", api.Model{Name: "a", Source: "./m"}, 400},
		{"bad sha256", api.Model{Name: "a", Source: "/m", SHA256: "abc"}, 400},
		{"negative size", api.Model{Name: "a", Source: "/m", Size: -5}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.admin.PutModel(ctx, tc.m)
			if status, code := apiCode(err); status != tc.want || code != api.CodeInvalid {
				t.Errorf("PutModel(%+v) = %v, want %d", tc.m, err, tc.want)
			}
		})
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "a", Source: "/m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "b", Source: "/m"}); !hasStatus(err, 409) {
		t.Errorf("second model with the same source: %v, want 409", err)
	}
	if err := e.admin.DeleteModel(ctx, "zzz"); !hasStatus(err, 404) {
		t.Errorf("DeleteModel(absent) = %v, want 404", err)
	}
	if _, err := e.anon.ModelStatus(ctx, "zzz"); !hasStatus(err, 404) {
		t.Errorf("ModelStatus(absent) = %v, want 404", err)
	}
	if models, _ := e.anon.Models(ctx); len(models) != 1 {
		t.Errorf("catalog = %+v, want one model", models)
	}
}

func hasStatus(err error, want int) bool {
	s, _ := apiCode(err)
	return s == want
}

// TestStatusPerFabric builds one cluster with every case status tells
// apart and checks the answer, the per-node answer and the table.
func TestStatusPerFabric(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 30 * time.Second, StallAfter: time.Minute}, testTokens)
	const qwen = "hf:Qwen/Qwen2.5-7B-GGUF/qwen2.5-7b-q4.gguf"
	models := []api.Model{
		{Name: "llama", Source: "/lustre/models/llama-70b", Size: 141e9},
		{Name: "qwen", Source: qwen, Size: 4.7e9},
		{Name: "mistral", Source: "/scratch/mistral"},
	}
	for _, m := range models {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	lustre := api.Weight{Path: "/lustre/models/llama-70b", Size: 141e9, Shared: true, Complete: true}
	qwenLocal := api.Weight{Path: catalog.CachePathFor("/var/cache/llmgw", qwen), Size: 4.7e9, Complete: true}
	halfQwen := api.Weight{Path: qwenLocal.Path, Complete: false, Problem: "missing part 2 of 2"}

	// n9 reports first and then falls silent: it goes stale.
	post := func(r *api.Report) {
		t.Helper()
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	post(report("n9", "ib-a", 1, lustre))
	e.clock.set(t0.Add(2 * time.Minute))
	now := t0.Add(2 * time.Minute)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		post(report(n, "ib-a", 1, lustre))
	}
	post(report("n5", "ib-a", 1, lustre, qwenLocal))
	post(report("n6", "ib-b", 1, halfQwen))
	fetching := report("n7", "ib-b", 1)
	fetching.Time = now
	fetching.Fetches = []api.Fetch{{Source: qwen, Done: 1.88e9, Total: 4.7e9, Rate: 100e6, Started: now.Add(-20 * time.Second), Progressed: now.Add(-time.Second)}}
	post(fetching)
	stuck := report("n8", "ib-b", 1)
	stuck.Time = now
	stuck.Fetches = []api.Fetch{{Source: qwen, Done: 1e9, Total: 4.7e9, Rate: 0, Started: now.Add(-10 * time.Minute), Progressed: now.Add(-5 * time.Minute)}}
	post(stuck)
	blind := report("n10", "ib-b", 1)
	blind.Looked = false
	post(blind)
	e.clock.set(now.Add(5 * time.Second))

	st, err := e.anon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Nodes, (api.NodeCounts{Total: 10, OK: 8, Stale: 1, NeverLooked: 1}); got != want {
		t.Errorf("node counts = %+v, want %+v", got, want)
	}
	if len(st.Fabrics) != 2 || st.Fabrics[0].Stale != "n9" || st.Fabrics[1].NeverLooked != "n10" {
		t.Errorf("fabrics = %+v; want ib-a with n9 stale, ib-b with n10 never looked", st.Fabrics)
	}
	type row struct{ serve, holders string }
	got := map[string]row{}
	for _, m := range st.Models {
		for _, p := range m.Fabrics {
			got[m.Model.Name+"/"+p.Fabric] = row{p.Serve, p.Holders}
		}
	}
	for k, want := range map[string]row{
		"llama/ib-a":   {"shared", "n[1-5]"}, // n9 is stale and does not count
		"llama/ib-b":   {"none", ""},
		"qwen/ib-a":    {"local", "n5"},
		"qwen/ib-b":    {"none", ""}, // n6's copy is incomplete
		"mistral/ib-a": {"none", ""},
	} {
		if got[k] != want {
			t.Errorf("%s = %+v, want %+v", k, got[k], want)
		}
	}
	var qwenB api.FabricPresence
	for _, m := range st.Models {
		if m.Model.Name == "qwen" {
			qwenB = m.Fabrics[1]
		}
	}
	if qwenB.FetchBytes != 4.7e9 || !qwenB.Fetchable || len(qwenB.Fetching) != 2 {
		t.Fatalf("qwen in ib-b = %+v; want fetchable 4.7 GB with two fetches", qwenB)
	}
	if f := qwenB.Fetching[0]; f.Node != "n7" || f.Stalled || f.Percent != 40 || f.ETA != 28.2 {
		t.Errorf("n7's fetch = %+v; want 40%%, not stalled, ETA 28.2 s", f)
	}
	if f := qwenB.Fetching[1]; f.Node != "n8" || !f.Stalled || f.ETA != -1 || f.SinceProgress != 305 {
		t.Errorf("n8's fetch = %+v; want stalled for 305 s", f)
	}

	var rendered bytes.Buffer
	if err := table.WriteStatus(&rendered, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"llama  ib-a    shared  filer (5 nodes)",
		"qwen   ib-a    local   local on 1 node",
		"qwen   ib-b    none    a job fetches 4.7 GB",
		"n7 40% 100 MB/s ETA 28s, n8 21% stalled 5m5s",
		"mistral  ", "nowhere (a path source is never fetched)",
		"STALE: no report for over 1m30s",
		"ib-a    n9",
		"ib-b    n10",
	} {
		if !strings.Contains(squeeze(rendered.String()), squeeze(want)) {
			t.Errorf("status table lacks %q:\n%s", want, rendered.String())
		}
	}

	mn, err := e.anon.ModelStatus(ctx, "qwen")
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string]api.NodePresence{}
	var order []string
	for _, n := range mn.Nodes {
		byNode[n.Node] = n
		order = append(order, n.Node)
	}
	if strings.Join(order, ",") != "n1,n2,n3,n4,n5,n6,n7,n8,n9,n10" {
		t.Errorf("node order = %v, want natural order", order)
	}
	if n := byNode["n5"]; n.Holds != api.HoldLocal || n.Path != qwenLocal.Path || n.State != api.NodeOK {
		t.Errorf("n5 = %+v; want a local copy", n)
	}
	if n := byNode["n6"]; n.Holds != api.HoldNone || !strings.Contains(n.Incomplete, "missing part 2") {
		t.Errorf("n6 = %+v; want none, incomplete", n)
	}
	if n := byNode["n7"]; n.Fetch == nil || n.Fetch.Percent != 40 {
		t.Errorf("n7 = %+v; want its fetch", n)
	}
	if n := byNode["n9"]; n.State != api.NodeStale {
		t.Errorf("n9 state = %s, want stale", n.State)
	}
	if n := byNode["n10"]; n.State != api.NodeNeverLooked || n.CacheFree != 500e9 {
		t.Errorf("n10 = %+v, want never-looked with its cache", n)
	}
	rendered.Reset()
	if err := table.WriteModelNodes(&rendered, mn); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"n6    ib-b    ok            none   incomplete " + qwenLocal.Path, "n8    ib-b    ok            none   -"} {
		if !strings.Contains(squeeze(rendered.String()), squeeze(want)) {
			t.Errorf("model table lacks %q:\n%s", want, rendered.String())
		}
	}
}

// TestCatalogAfterReports: a model added after the reports that hold it is
// held at once, and removing it stops it being held.
func TestCatalogAfterReports(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	const src = "https://example.org/m/model.safetensors"
	w := api.Weight{Path: catalog.CachePathFor("/var/cache/llmgw", src), Size: 10, Complete: true}
	if _, err := e.agent.PostReport(ctx, report("gpu01", "ib-a", 1, w)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	st, err := e.anon.ModelStatus(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if st.Fabrics[0].Serve != api.HoldLocal || st.Nodes[0].Holds != api.HoldLocal {
		t.Fatalf("after adding the model: %+v; want gpu01 holding it", st)
	}
	if err := e.admin.DeleteModel(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: "https://example.org/elsewhere/model.safetensors"}); err != nil {
		t.Fatal(err)
	}
	st, _ = e.anon.ModelStatus(ctx, "m")
	if st.Fabrics[0].Serve != api.HoldNone {
		t.Fatalf("after pointing the model elsewhere: %+v; want none", st.Fabrics[0])
	}
}

func TestReportOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	a := api.Weight{Path: "/m/a", Complete: true}
	b := api.Weight{Path: "/m/b", Complete: true}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "a", Source: "/m/a"}); err != nil {
		t.Fatal(err)
	}
	var ans ReportAnswer
	if err := e.agent.Do(ctx, http.MethodPost, "/v1/reports", report("n1", "f", 2, b), &ans); err != nil || ans.Result != "stored" {
		t.Fatalf("report seq 2: %+v, %v", ans, err)
	}
	if err := e.agent.Do(ctx, http.MethodPost, "/v1/reports", report("n1", "f", 1, a), &ans); err != nil || ans.Result != "dropped" {
		t.Fatalf("late report seq 1: %+v, %v; want dropped", ans, err)
	}
	st, _ := e.anon.ModelStatus(ctx, "a")
	if st.Nodes[0].Holds != api.HoldNone {
		t.Errorf("the late report's weights were stored: %+v", st.Nodes[0])
	}
}

// TestConcurrentReports posts from many goroutines at once: every report is
// answered after it is stored, across batches.
func TestConcurrentReports(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{MaxBatch: 16, MaxBatchWait: 5 * time.Millisecond}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: "/m"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			_, err := e.agent.PostReport(ctx, report(fmt.Sprintf("n%d", i), "f", 1, api.Weight{Path: "/m", Complete: true, Shared: true}))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, _ := e.anon.Status(ctx)
	if p := st.Models[0].Fabrics[0]; p.SharedNodes != 200 || p.Holders != "n[0-199]" {
		t.Errorf("after 200 reports: %+v", p)
	}
	nodes, _ := e.db.Nodes(ctx)
	if len(nodes) != 200 {
		t.Errorf("database has %d nodes, want 200", len(nodes))
	}
}

func TestReadyz(t *testing.T) {
	e := newEnv(t, Config{}, testTokens)
	get := func() int {
		resp, err := http.Get(e.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(); c != 200 {
		t.Fatalf("/readyz = %d, want 200", c)
	}
	e.nodeClient(t, "n1") // made while the database can still store it
	e.db.Close()
	if c := get(); c != 503 {
		t.Errorf("/readyz with the database closed = %d, want 503", c)
	}
	_, err := e.agent.PostReport(context.Background(), report("n1", "f", 1))
	if !hasStatus(err, 503) {
		t.Errorf("report with the database closed: %v, want 503", err)
	}
	resp, err := http.Get(e.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz = %v, %v; the process is up", resp, err)
	}
}

func jsonBody(v any) func() io.Reader {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return func() io.Reader { return bytes.NewReader(b) }
}

func strBody(s string) func() io.Reader {
	return func() io.Reader { return strings.NewReader(s) }
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// squeeze collapses runs of spaces, so table checks do not depend on the
// column widths other rows set.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// TestUnchangedWeights covers the path that skips decoding weights the node
// already sent: the holdings stay right across it, across a catalog change,
// and a guess that went stale is sent back for the weights.
func TestUnchangedWeights(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	a := api.Weight{Path: "/m/a", Size: 1, Complete: true, Shared: true}
	b := api.Weight{Path: "/m/b", Size: 2, Complete: true}
	holds := func(model string) string {
		t.Helper()
		st, err := e.anon.ModelStatus(ctx, model)
		if err != nil {
			t.Fatal(err)
		}
		return st.Nodes[0].Holds
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "a", Source: "/m/a"}); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		if _, err := e.agent.PostReport(ctx, report("n1", "f", seq, a)); err != nil {
			t.Fatal(err)
		}
	}
	if h := holds("a"); h != api.HoldShared {
		t.Fatalf("after three identical reports n1 holds a: %s, want shared", h)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "b", Source: "/m/b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.agent.PostReport(ctx, report("n1", "f", 4, a)); err != nil {
		t.Fatal(err)
	}
	if h := holds("a"); h != api.HoldShared {
		t.Fatalf("after a catalog change and an identical report, n1 holds a: %s, want shared", h)
	}
	// A handler's guess that no longer holds is sent back.
	q := &queued{r: report("n1", "f", 5), key: [32]byte{1}, same: true, done: make(chan ingestResult, 1)}
	res, err := e.srv.ingest([]*queued{q})
	if err != nil || !res[0].retry {
		t.Fatalf("ingest of a stale guess = %+v, %v; want retry", res, err)
	}
	if _, err := e.agent.PostReport(ctx, report("n1", "f", 6, b)); err != nil {
		t.Fatal(err)
	}
	if ha, hb := holds("a"), holds("b"); ha != api.HoldNone || hb != api.HoldLocal {
		t.Fatalf("after n1 reports b only: a %s, b %s", ha, hb)
	}
	if ps, _ := e.db.NodePresence(ctx, "n1"); len(ps) != 1 || ps[0].Model != "b" {
		t.Fatalf("stored presence = %+v", ps)
	}
}

// TestTwoReportsOfOneNodeInABatch: a report judged "unchanged" against the
// committed weights must not be stored as unchanged when a report of the
// same node ahead of it in the batch changed them. It once left the node
// holding what the middle report said, for good.
func TestTwoReportsOfOneNodeInABatch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{MaxBatchWait: 300 * time.Millisecond}, testTokens)
	a := api.Weight{Path: "/m/a", Size: 1, Complete: true}
	b := api.Weight{Path: "/m/b", Size: 2, Complete: true}
	for _, m := range []api.Model{{Name: "a", Source: "/m/a"}, {Name: "b", Source: "/m/b"}} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.agent.PostReport(ctx, report("n1", "f", 1, a)); err != nil {
		t.Fatal(err)
	}
	// seq 2 (holds b) and seq 3 (holds a again, the committed bytes) wait
	// in one batch.
	var wg sync.WaitGroup
	wg.Go(func() { e.agent.PostReport(ctx, report("n1", "f", 2, b)) })
	time.Sleep(50 * time.Millisecond)
	wg.Go(func() { e.agent.PostReport(ctx, report("n1", "f", 3, a)) })
	wg.Wait()
	for m, want := range map[string]string{"a": api.HoldLocal, "b": api.HoldNone} {
		st, err := e.anon.ModelStatus(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Nodes[0].Holds; got != want {
			t.Errorf("after reports a, b, a: n1 holds %s of model %s; want %s", got, m, want)
		}
	}
}

func TestCatalogSourceRules(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	// Two spellings of one path are one source.
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "a", Source: "/m/a"}); err != nil {
		t.Fatal(err)
	}
	_, err := e.admin.PutModel(ctx, api.Model{Name: "b", Source: "/m/./a/"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Errorf("adding /m/./a/ beside /m/a = %v; want a conflict", err)
	}
	// A remote file that no scan would take for weights is refused.
	_, err = e.admin.PutModel(ctx, api.Model{Name: "c", Source: "https://example.org/llama-3-8b"})
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, "weight file") {
		t.Errorf("adding a remote source without a weight file name = %v; want invalid, naming the reason", err)
	}
}
