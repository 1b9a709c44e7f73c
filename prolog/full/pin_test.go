package full

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// pinCluster is a real coordinator (sqlite file, HTTP on 127.0.0.1) and an
// origin on 127.0.0.1 whose bytes the test changes between fetches.
type pinCluster struct {
	t      *testing.T
	coord  string
	admin  *api.Client
	origin *httptest.Server
	body   atomic.Pointer[[]byte]
	hits   atomic.Int64
	// tokens are the nodes' own tokens, made once per node: making one
	// again revokes the one before.
	tokens map[string]string
}

const pinAdminToken = "admin-token-for-the-pin-test"

func newPinCluster(t *testing.T, first []byte) *pinCluster {
	ctx := context.Background()
	c := &pinCluster{t: t}
	c.body.Store(&first)
	c.origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.hits.Add(1)
		body := *c.body.Load()
		// A validator per version, as a real origin sends: the pin
		// records it beside the digest.
		w.Header().Set("ETag", etagOf(body))
		http.ServeContent(w, r, "w.gguf", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(c.origin.Close)
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinator.New(ctx, coordinator.Config{}, coordinator.Tokens{Admin: pinAdminToken}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	c.coord = ts.URL
	c.admin = &api.Client{BaseURL: ts.URL, Token: pinAdminToken}
	return c
}

// node is node's Prolog, with its own cache, resolving through the
// coordinator with the node's own token.
func (c *pinCluster) node(node string) (*Prolog, *bytes.Buffer) {
	p, log, _ := newProlog(c.t)
	p.Coordinator = &api.Client{BaseURL: c.coord, Token: c.token(node)}
	return p, log
}

// token is node's own token, made by an admin as `llmgw nodes token` does.
func (c *pinCluster) token(node string) string {
	if tok, ok := c.tokens[node]; ok {
		return tok
	}
	made, err := c.admin.NewNodeToken(context.Background(), node)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.tokens == nil {
		c.tokens = map[string]string{}
	}
	c.tokens[node] = made.Token
	return made.Token
}

func (c *pinCluster) model(name string) catalog.Model {
	models, err := c.admin.Models(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, m := range models {
		if m.Name == name {
			return m
		}
	}
	c.t.Fatalf("model %s not in the catalog %+v", name, models)
	return catalog.Model{}
}

// agentFor starts a real agent for p's node, on p's socket and cache, and
// returns once its socket answers: p's ensures then go through it.
func (c *pinCluster) agentFor(node string, p *Prolog) {
	ag := c.newAgent(node, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	c.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			c.t.Errorf("agent %s: %v", node, err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.Agent.Status(sctx)
		scancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("agent %s: socket never answered: %v", node, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *pinCluster) newAgent(node string, p *Prolog) *agent.Agent {
	dir := c.t.TempDir()
	tok := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(tok, []byte(c.token(node)+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ag, err := agent.New(agent.Config{Node: node, CacheDir: p.Config.CacheDir, StateDir: filepath.Join(dir, "state"),
		Socket: p.Config.Socket, Coordinator: c.coord, TokenFile: tok, Version: "test", ReportInterval: time.Hour}, log)
	if err != nil {
		c.t.Fatal(err)
	}
	return ag
}

// report has a real agent report the node's cache to the coordinator once.
func (c *pinCluster) report(node string, p *Prolog) {
	if _, sent, err := c.newAgent(node, p).Once(context.Background()); err != nil || !sent {
		c.t.Fatalf("agent report for %s: sent %v, %v", node, sent, err)
	}
}

// etagOf is the pin test origin's ETag for body.
func etagOf(body []byte) string { return `"v-` + hexSum(body)[:8] + `"` }

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// run runs a job's Prolog on p and returns its record and what the
// TaskProlog then does with it (its error fails the job).
func run(t *testing.T, p *Prolog, node, id, model string) (catalog.JobRecord, error) {
	p.Run(context.Background(), prolog.Job{ID: id, Node: node, Model: model}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return rec, prolog.TaskProlog(p.Config.RunDir, id, func(string) string { return "" }, io.Discard)
}

func TestPinnedBytesForTheWholeCluster(t *testing.T) {
	ctx := context.Background()
	a := bytes.Repeat([]byte("first bytes "), 4096)
	b := bytes.Repeat([]byte("other bytes "), 4096) // the same size: only the digest tells them apart
	c := newPinCluster(t, a)
	src := c.origin.URL + "/w.gguf"
	if _, err := c.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}

	// The first verified fetch pins what it got.
	n1, log1 := c.node("n1")
	if rec, err := run(t, n1, "n1", "1", "m"); err != nil || rec.Path == "" {
		t.Fatalf("first fetch: record %+v, task prolog %v; log:\n%s", rec, err, log1)
	}
	if m := c.model("m"); m.Pinned != hexSum(a) || m.SHA256 != "" || m.PinnedETag != "ETag: "+etagOf(a) {
		t.Fatalf("after the first fetch the catalog has %+v; want pinned %s, served as ETag: %s", m, hexSum(a), etagOf(a))
	}

	// A second node verifies against the pin and gets the same bytes.
	n2, log2 := c.node("n2")
	rec, err := run(t, n2, "n2", "2", "m")
	if err != nil {
		t.Fatalf("second node: %v; log:\n%s", err, log2)
	}
	if got, _ := os.ReadFile(rec.Path); !bytes.Equal(got, a) {
		t.Fatalf("second node holds other bytes than the pin")
	}

	// The origin changes its bytes: a new fetch fails, naming the model,
	// both digests and the command that accepts the new bytes.
	c.body.Store(&b)
	n3, log3 := c.node("n3")
	rec, err = run(t, n3, "n3", "3", "m")
	for _, want := range []string{"model m", hexSum(a), hexSum(b), "llmgw models repin m", "served as ETag: " + etagOf(a)} {
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(rec.Error, want) {
			t.Errorf("fetch of changed bytes: task prolog %v, record %q; want it to name %q; log:\n%s", err, rec.Error, want, log3)
		}
	}
	if _, serr := os.Stat(catalog.CachePathFor(n3.Config.CacheDir, src)); serr == nil {
		t.Errorf("the changed bytes are in n3's cache under the real name")
	}
	// A node that holds the pinned bytes keeps them, and serves them
	// without asking the origin.
	hits := c.hits.Load()
	if rec, err := run(t, n1, "n1", "4", "m"); err != nil || c.hits.Load() != hits {
		t.Errorf("n1, holding the pinned bytes: record %+v, %v, origin asked %d times", rec, err, c.hits.Load()-hits)
	}
	if got, _ := os.ReadFile(catalog.CachePathFor(n1.Config.CacheDir, src)); !bytes.Equal(got, a) {
		t.Errorf("n1 no longer holds the pinned bytes")
	}
	// ... and its agent reports them held; n3, whose fetch failed, holds none.
	c.report("n1", n1)
	c.report("n3", n3)
	st, err := c.admin.ModelStatus(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	holds := map[string]string{}
	for _, n := range st.Nodes {
		holds[n.Node] = n.Holds
	}
	if holds["n1"] == api.HoldNone || holds["n1"] == "" || holds["n3"] != api.HoldNone {
		t.Errorf("after the origin changed, status has holds %v; want n1 holding, n3 not", holds)
	}

	// An admin accepts the new bytes: the next verified fetch pins them.
	if err := c.admin.Repin(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if m := c.model("m"); m.Pinned != "" {
		t.Fatalf("after repin the catalog still has pin %s", m.Pinned)
	}
	if rec, err := run(t, n3, "n3", "6", "m"); err != nil {
		t.Fatalf("fetch after repin: %+v, %v; log:\n%s", rec, err, log3)
	}
	if m := c.model("m"); m.Pinned != hexSum(b) {
		t.Fatalf("after repin and a fetch the pin is %s; want %s", m.Pinned, hexSum(b))
	}
	// n1 holds the old pin's bytes, of the same size: its fast path (no
	// network, no hashing) must not take them for the new pin's.
	if err := catalog.WriteCopy(n1.Config.CatalogCopyPath(), catalog.Copy{Coordinator: c.coord, Models: []catalog.Model{c.model("m")}}); err != nil {
		t.Fatal(err)
	}
	if err := prolog.Fast(n1.Config, prolog.Job{ID: "8", Model: "m"}, time.Now()); !errors.Is(err, prolog.ErrNotPresent) {
		t.Errorf("fast path on n1, which holds the old pin's bytes: %v; want ErrNotPresent", err)
	}
	// n1's next fetch takes the new ones.
	rec, err = run(t, n1, "n1", "7", "m")
	if got, _ := os.ReadFile(rec.Path); err != nil || !bytes.Equal(got, b) {
		t.Errorf("n1 after repin: %+v, %v; want the new pinned bytes", rec, err)
	}
}

// A node that fetched before the pin existed, but after the origin had
// changed, got other bytes than the node that pinned: its job fails and
// the bytes leave its cache, so that no job runs on two sets of bytes.
func TestAConflictingFirstFetchFailsItsJob(t *testing.T) {
	ctx := context.Background()
	a := bytes.Repeat([]byte("first bytes "), 4096)
	b := bytes.Repeat([]byte("other bytes "), 4096)
	c := newPinCluster(t, a)
	src := c.origin.URL + "/w.gguf"
	if _, err := c.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	n1, _ := c.node("n1")
	n2, log2 := c.node("n2")
	// n2 resolves the model before n1 pins it, as when both jobs start
	// together; its fetch then meets the changed origin.
	m := c.model("m")
	if _, err := run(t, n1, "n1", "1", "m"); err != nil {
		t.Fatal(err)
	}
	c.body.Store(&b)
	_, err := n2.ensure(ctx, prolog.Job{ID: "2", Node: "n2", Model: "m"}, m)
	// The coordinator's refusal names how the origin served the pinned
	// version, which it recorded from n1's pin.
	for _, want := range []string{"model m", hexSum(a), hexSum(b), "llmgw models repin m", "served as ETag: " + etagOf(a)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("conflicting first fetch: %v; want it to name %q; log:\n%s", err, want, log2)
		}
	}
	if _, serr := os.Stat(catalog.CachePathFor(n2.Config.CacheDir, src)); serr == nil {
		t.Errorf("the conflicting bytes stay in n2's cache, where the fast path would take them")
	}
}

// A man in the middle on plain HTTP who rewrites the bytes of a later
// fetch cannot make a node take them: the pin catches it.
func TestAManInTheMiddleCannotChangePinnedBytes(t *testing.T) {
	ctx := context.Background()
	a := bytes.Repeat([]byte("the real bytes "), 4096)
	c := newPinCluster(t, a)
	var rewrite atomic.Bool
	// A forward proxy, as a node configured with http_proxy talks to.
	mitm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, r.URL.String(), nil)
		out.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		if !rewrite.Load() {
			io.Copy(w, resp.Body)
			return
		}
		// Same length, other bytes: a size check alone would pass them.
		br := bufio.NewReader(resp.Body)
		for {
			ch, err := br.ReadByte()
			if err != nil {
				return
			}
			if ch == 'r' {
				ch = 'X'
			}
			w.Write([]byte{ch})
		}
	}))
	t.Cleanup(mitm.Close)
	proxy, _ := url.Parse(mitm.URL)
	src := c.origin.URL + "/w.gguf"
	if _, err := c.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	viaMITM := func(node string) (*Prolog, *bytes.Buffer) {
		p, log := c.node(node)
		p.Fetcher = &fetch.Fetcher{CacheDir: p.Config.CacheDir, LockDir: p.Config.LockDir(), RetryWait: time.Millisecond, Retries: 1,
			Client: &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableCompression: true}}}
		return p, log
	}
	n1, log1 := viaMITM("n1")
	if _, err := run(t, n1, "n1", "1", "m"); err != nil {
		t.Fatalf("fetch through an honest proxy: %v; log:\n%s", err, log1)
	}
	rewrite.Store(true)
	n2, log2 := viaMITM("n2")
	rec, err := run(t, n2, "n2", "2", "m")
	if err == nil || rec.Path != "" || !strings.Contains(rec.Error, "llmgw models repin m") {
		t.Fatalf("fetch through a rewriting proxy: record %+v, task prolog %v; want the job failed by the pin; log:\n%s", rec, err, log2)
	}
	if _, serr := os.Stat(catalog.CachePathFor(n2.Config.CacheDir, src)); serr == nil {
		t.Errorf("the rewritten bytes are in n2's cache under the real name")
	}
	if m := c.model("m"); m.Pinned != hexSum(a) {
		t.Errorf("the pin moved to %s; want %s", m.Pinned, hexSum(a))
	}
}

// Through the node's agent, as on a node where it runs: the pinned digest
// crosses the socket, and so does the mismatch.
func TestPinThroughTheAgent(t *testing.T) {
	ctx := context.Background()
	a := bytes.Repeat([]byte("first bytes "), 4096)
	b := bytes.Repeat([]byte("other bytes "), 4096)
	c := newPinCluster(t, a)
	if _, err := c.admin.PutModel(ctx, api.Model{Name: "m", Source: c.origin.URL + "/w.gguf"}); err != nil {
		t.Fatal(err)
	}
	n1, log1 := c.node("n1")
	c.agentFor("n1", n1)
	if _, err := run(t, n1, "n1", "1", "m"); err != nil || strings.Contains(log1.String(), "no agent") {
		t.Fatalf("first fetch through the agent: %v; log:\n%s", err, log1)
	}
	if m := c.model("m"); m.Pinned != hexSum(a) {
		t.Fatalf("pin after a fetch through the agent: %q; want %s", m.Pinned, hexSum(a))
	}
	c.body.Store(&b)
	n2, log2 := c.node("n2")
	c.agentFor("n2", n2)
	_, err := run(t, n2, "n2", "2", "m")
	for _, want := range []string{"model m", hexSum(a), hexSum(b), "llmgw models repin m"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("changed bytes through the agent: %v; want it to name %q; log:\n%s", err, want, log2)
		}
	}
}
