package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/coordinator/store"
)

// TestControlCharactersInAReport posts what a hostile agent would: an ESC
// sequence that clears and recolours the screen, and a newline followed by
// a fake status row. Neither may reach an operator's terminal: free text is
// stripped at ingest, and a path (kept as sent, since it names a file) is
// escaped when printed.
func TestControlCharactersInAReport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: "/m/a"}); err != nil {
		t.Fatal(err)
	}
	const fakeRow = "\nn99  ib-a  ok  local  /m/a  500 GB  -  0s ago"
	rep := report("n1", "ib-a", 1,
		api.Weight{Path: "/m/a", Size: 5, Complete: false, Problem: "shard missing\x1b[2J\x1b[31m" + fakeRow})
	rep.Errors = []string{"scan failed\x1b]0;pwned\x07" + fakeRow, "c1 \u009b31m"}
	rep.AgentVersion = "1.0\x1b[1A"
	if _, err := e.agent.PostReport(ctx, rep); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(e.url + "/v1/status/m")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The JSON encoder would write ESC as \u001b; the stored text has none.
	for _, bad := range []string{`\u001b`, `\u009b`, `\n`, `\u0007`} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("status answer carries %s from the report's free text: %s", bad, raw)
		}
	}

	st, err := e.anon.ModelStatus(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := table.WriteModelNodes(&out, st); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\x07\u009b") {
		t.Errorf("the table holds control characters:\n%q", text)
	}
	if strings.Contains(text, "\nn99") {
		t.Errorf("the report drew a row of its own:\n%s", text)
	}
	if !strings.Contains(text, "shard missing[2J[31m n99") {
		t.Errorf("the node's problem is not shown, stripped:\n%s", text)
	}

	// A path names a file and may hold any byte; it is kept as sent and
	// escaped where printed. So is anything a tampered answer holds.
	st.Nodes[0].Path = "/m/a\x1b[8m" + fakeRow
	st.Nodes[0].Holds = api.HoldLocal
	out.Reset()
	if err := table.WriteModelNodes(&out, st); err != nil {
		t.Fatal(err)
	}
	text = out.String()
	if strings.ContainsAny(text, "\x1b") || strings.Contains(text, "\nn99") || !strings.Contains(text, `/m/a\x1b[8m\x0an99`) {
		t.Errorf("a path with ESC and a newline is not escaped:\n%s", text)
	}
}

// TestBadSources tries each source an attacker or a slip would register;
// every one is refused at models add, with its reason, and nothing is
// stored.
func TestBadSources(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	for src, want := range map[string]string{
		"file:///etc/shadow":                     `scheme "file"`,
		"ftp://mirror.example/m.gguf":            `scheme "ftp"`,
		"hf:../../x.gguf":                        "not a hub name",
		"hf:org/repo@../../../x.gguf":            "'..' segment",
		"https://user:secret@example.org/m.gguf": "user name or password",
		"./m.gguf":                               "relative",
	} {
		_, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: src})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, want) {
			t.Errorf("models add m %s = %v; want invalid, with %q", src, err, want)
		}
		if ae != nil && strings.Contains(ae.Message, "secret") {
			t.Errorf("the refusal repeats the password: %s", ae.Message)
		}
	}
	if models, _ := e.admin.Models(ctx); len(models) != 0 {
		t.Errorf("refused sources were stored: %+v", models)
	}
}

// TestSignedQueryOnlyToFetchers registers a signed URL and reads the
// catalog as a stranger (no token), as a holder of the read token, and as
// an agent: only the agent, which must fetch it, is sent the signature.
func TestSignedQueryOnlyToFetchers(t *testing.T) {
	ctx := context.Background()
	tokens := testTokens
	tokens.Read = "read-secret"
	e := newEnv(t, Config{}, tokens)
	const src = "https://bucket.example/m.gguf?X-Amz-Signature=deadbeef&X-Amz-Expires=3600"
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	for who, c := range map[string]*api.Client{"reader": e.client("read-secret"), "agent": e.nodeClient(t, "n1"), "admin": e.admin} {
		models, err := c.Models(ctx)
		if err != nil || len(models) != 1 {
			t.Fatalf("%s: Models = %+v, %v", who, models, err)
		}
		got := models[0].Source
		switch who {
		case "reader":
			if strings.Contains(got, "deadbeef") || !strings.HasPrefix(got, "https://bucket.example/m.gguf?REDACTED-") {
				t.Errorf("a reader is sent %q", got)
			}
		default:
			if got != src {
				t.Errorf("%s is sent %q, want the whole source to fetch", who, got)
			}
		}
	}
	// With reads open, a stranger is a reader too.
	e2 := newEnv(t, Config{}, testTokens)
	if _, err := e2.admin.PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	// A node fetching it names the source in its report, and status and
	// placement show fetches in progress.
	rep := report("n1", "ib-a", 1)
	rep.Fetches = []api.Fetch{{Source: src, Done: 1, Total: 10, Started: t0, Progressed: t0}}
	if _, err := e2.agent.PostReport(ctx, rep); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/models", "/v1/status", "/v1/status/m", "/v1/placement?model=m"} {
		resp, err := http.Get(e2.url + path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(raw), "deadbeef") || !strings.Contains(string(raw), "REDACTED") {
			t.Errorf("the open GET %s = %d %s; want the source without its signature", path, resp.StatusCode, raw)
		}
	}
}

// TestReadyzOnAReadOnlyDatabase starts a coordinator on a database file
// it may read and not write: sqlite then opens it read-only, reads work and
// every write fails, and readiness must say so. The tests run as root,
// which file modes do not stop, so the file is made immutable
// (chattr +i), which stops root too. (A read-only mount is refused earlier:
// sqlite cannot open a WAL database there at all, and the coordinator does
// not start.)
func TestReadyzOnAReadOnlyDatabase(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "coordinator.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.PutModel(ctx, api.Model{Name: "m", Source: "/m"}, t0); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
			t.Skipf("chattr +i %s: %v %s", path, err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
	} else if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(ctx, path)
	if err != nil {
		t.Fatalf("open a read-only database: %v", err)
	}
	srv, err := New(ctx, Config{}, testTokens, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); db.Close() })
	// Reads work: the catalog is there.
	if models, err := (&api.Client{BaseURL: ts.URL}).Models(ctx); err != nil || len(models) != 1 {
		t.Fatalf("catalog from a read-only database = %v, %v", models, err)
	}
	resp, err := http.Get(ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "cannot be written") {
		t.Errorf("/readyz on a read-only database = %d %s; want 503 saying it cannot be written", resp.StatusCode, body)
	}
	// And it is right: a report fails.
	// The admin token, which may report: a node's token could not be made
	// in a database that cannot be written.
	agent := &api.Client{BaseURL: ts.URL, Token: testTokens.Admin}
	if _, err := agent.PostReport(ctx, report("n1", "f", 1)); err == nil {
		t.Error("a report to a read-only database was accepted")
	}
}

// TestFabricLabelsAreBounded posts 3,000 reports that each name a fabric of
// their own, as an attacker with a token would: /metrics must not grow a
// series per name. Fabrics of the nodes Slurm knows keep their labels.
func TestFabricLabelsAreBounded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/lustre/llama"}); err != nil {
		t.Fatal(err)
	}
	held := api.Weight{Path: "/lustre/llama", Shared: true, Complete: true}
	for _, n := range []string{"n1", "n2"} {
		if _, err := e.agent.PostReport(ctx, report(n, "ib-a", 1, held)); err != nil {
			t.Fatal(err)
		}
	}
	const fakes = 3000
	var wg sync.WaitGroup
	errs := make(chan error, fakes)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < fakes; i += 8 {
				if _, err := e.agent.PostReport(ctx, report(fmt.Sprintf("fake%d", i), fmt.Sprintf("fab%d", i), 1, held)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	series := func() int {
		return testutil.CollectAndCount(e.srv.metrics.reg, "llmgw_coordinator_model_holders")
	}
	// Before Slurm's node list is known: at most MaxFabricLabels fabrics
	// and "other", two kinds each, for the one model.
	if got, limit := series(), 2*(MaxFabricLabels+1); got > limit {
		t.Errorf("%d fabricated fabrics made %d holder series; want at most %d", fakes, got, limit)
	}
	// With Slurm's list, only the fabric its nodes report is labelled,
	// and nothing is lost: the fabricated holders are counted as "other".
	e.srv.SetSlurmStates(map[string]string{"n1": "idle", "n2": "idle"})
	if got := series(); got != 4 {
		t.Errorf("with Slurm's node list, %d holder series; want 4 (ib-a and other, shared and local)", got)
	}
	if got := testutil.ToFloat64(metricWith(t, e, "ib-a")); got != 2 {
		t.Errorf("ib-a shared holders = %v, want 2", got)
	}
	if got := testutil.ToFloat64(metricWith(t, e, otherFabric)); got != fakes {
		t.Errorf("other shared holders = %v, want %d", got, fakes)
	}
}

// metricWith is the shared-holders gauge of llama in fabric, as scraped.
func metricWith(t *testing.T, e *testEnv, fabric string) prometheus.Collector {
	t.Helper()
	mfs, err := e.srv.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "llmgw_coordinator_model_holders" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["fabric"] == fabric && l["kind"] == api.HoldShared {
				g.Set(m.GetGauge().GetValue())
			}
		}
	}
	return g
}

// TestPlacementNodeListIsCapped asks for placement over n[0-99999], the
// 50 MB answer of the issue: the list is refused beyond the nodes the
// coordinator knows, and a list within them is answered.
func TestPlacementNodeListIsCapped(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/lustre/llama"}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := e.agent.PostReport(ctx, report(fmt.Sprintf("n%d", i), "ib-a", 1)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(e.url + "/v1/placement?model=llama&nodes=n[0-99999]")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || len(body) > 4096 || !strings.Contains(string(body), "knows 10") {
		t.Errorf("placement over n[0-99999] = %d, %d bytes: %.200s; want a short 400 naming the 10 nodes known", resp.StatusCode, len(body), body)
	}
	// Slurm's node list counts as known too.
	states := map[string]string{}
	for i := range 200 {
		states[fmt.Sprintf("n%d", i)] = "idle"
	}
	e.srv.SetSlurmStates(states)
	p, err := e.anon.Placement(ctx, api.PlacementQuery{Model: "llama", Nodes: "n[0-199]"})
	if err != nil || len(p.Nodes) != 200 {
		t.Errorf("placement over the 200 nodes Slurm lists: %v nodes, %v", len(p.Nodes), err)
	}
}

// TestExpensiveReadsAreBounded fills every read slot, as that many slow
// status reads would: the next read is answered 503 with Retry-After at
// once rather than piling up, a report still goes through, and reads are
// answered again as soon as a slot is free.
func TestExpensiveReadsAreBounded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	e.srv.readWait = 0
	for range cap(e.srv.reads) {
		e.srv.reads <- struct{}{}
	}
	for _, path := range []string{"/v1/status", "/v1/placement?model=x", "/v1/status/x"} {
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("GET %s with every read slot taken = %d, Retry-After %q; want 503 with Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if _, err := e.agent.PostReport(ctx, report("n1", "ib-a", 1)); err != nil {
		t.Errorf("a report while reads are saturated: %v", err)
	}
	<-e.srv.reads
	if _, err := e.anon.Status(ctx); err != nil {
		t.Errorf("status with a slot free: %v", err)
	}
}
