package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/coordinator/store"
)

// fixedNodes stands in for Slurm's node list, which needs a cluster: the
// list is pure data, the credentials checked against it are real.
type fixedNodes struct {
	mu    sync.Mutex
	nodes []KnownNode
	reads atomic.Int64
}

func (f *fixedNodes) KnownNodes(context.Context) ([]KnownNode, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]KnownNode{}, f.nodes...), nil
}

// mungeEnv is a coordinator with MUNGE on, its own munged at 127.0.0.1,
// and two nodes, n1 at 127.0.0.2 and n2 at 127.0.0.3, each with its own
// munged (one key for all, as in a cluster).
type mungeEnv struct {
	*testEnv
	n1, n2 munge.Codec
	// coord is the coordinator's own munged, at 127.0.0.1: n2's
	// NodeHostname (localhost) resolves to it.
	coord munge.Codec
	nodes *fixedNodes
	// realm starts more munged daemons with the same key.
	realm *mungetest.Realm
}

// slurmUserUID is the test's SlurmUser: daemon, uid 1 on Debian. The
// test's admin_groups is nogroup (65534, nobody's group); nonAdminUID (mail,
// in its own group 8) is neither.
const (
	slurmUserUID = 1
	nonAdminUID  = 8
)

func newMungeEnv(t *testing.T) *mungeEnv { return newMungeEnvWith(t, nil) }

// newMungeEnvWith is newMungeEnv with the configuration changed by set.
func newMungeEnvWith(t *testing.T, set func(*Config)) *mungeEnv {
	realm := mungetest.New(t)
	coord := realm.Start("127.0.0.1")
	m := &mungeEnv{n1: realm.Start("127.0.0.2"), n2: realm.Start("127.0.0.3")}
	m.nodes = &fixedNodes{nodes: []KnownNode{{Name: "n1", Addrs: []string{"127.0.0.2", ""}}, {Name: "n2", Addrs: []string{"127.0.0.3", "localhost"}}}}
	m.coord, m.realm = coord, realm
	cfg := Config{MungeSocket: coord.Socket(), Nodes: m.nodes, SlurmUser: fmt.Sprint(slurmUserUID), AdminGroups: []string{"nogroup"}}
	if set != nil {
		set(&cfg)
	}
	m.testEnv = newEnv(t, cfg, testTokens)
	return m
}

// as is a client authenticating with codec's munged as root.
func (m *mungeEnv) as(codec munge.Codec) *api.Client {
	return &api.Client{BaseURL: m.url, Auth: munge.Authenticator{Codec: codec}}
}

// raw sends one request with the Authorization header given.
func (m *mungeEnv) raw(t *testing.T, method, path string, body []byte, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, m.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// credFor makes a credential as uid on codec's host for exactly this request.
func credFor(t *testing.T, codec munge.Codec, uid uint32, method, path string, body []byte) string {
	return api.MungeScheme + " " + mungetest.EncodeAs(t, codec, uid, uid, api.MungePayload(method, path, body))
}

func (m *mungeEnv) nodeNames(t *testing.T) []string { return nodeNames(t, m.db) }

func nodeNames(t *testing.T, db *store.DB) []string {
	t.Helper()
	nodes, err := db.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// wantDenied checks err is the one refusal every failed check gives.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 401 || ae.Message != errDenied.Message {
		t.Errorf("%s: %v, want the one refusal (401 %q)", what, err, errDenied.Message)
	}
}

func TestMungeReportFromItsOwnNode(t *testing.T) {
	m := newMungeEnv(t)
	ans, err := m.as(m.n1).PostReport(context.Background(), report("n1", "", 1))
	if err != nil || ans.Result != "stored" {
		t.Fatalf("n1's report with n1's credential: %+v, %v", ans, err)
	}
	if got := m.nodeNames(t); len(got) != 1 || got[0] != "n1" {
		t.Errorf("nodes stored: %v, want [n1]", got)
	}
}

func TestMungeNodeCannotSpeakForAnother(t *testing.T) {
	m := newMungeEnv(t)
	_, err := m.as(m.n1).PostReport(context.Background(), report("n2", "", 1))
	wantDenied(t, "n1's root credential posting n2's report", err)
	if got := m.nodeNames(t); len(got) != 0 {
		t.Errorf("nodes stored: %v, want none", got)
	}
	// And a gc answer for n2 from n1 is refused the same way.
	body, _ := json.Marshal(api.GCAnswer{Node: "n2"})
	path := "/v1/gc/00000000-0000-0000-0000-000000000000/answers"
	code, text := m.raw(t, http.MethodPost, path, body, credFor(t, m.n1, 0, http.MethodPost, path, body))
	if code != 401 {
		t.Errorf("n1 answering gc for n2: %d %s, want 401", code, text)
	}
}

// TestMungeNodeHostnameResolved: a node's NodeHostname counts as its
// address once resolved (n2's is localhost, where the coordinator's own
// munged says it is).
func TestMungeNodeHostnameResolved(t *testing.T) {
	m := newMungeEnv(t)
	if _, err := m.as(m.coord).PostReport(context.Background(), report("n2", "", 1)); err != nil {
		t.Fatalf("n2's report from its NodeHostname's address: %v", err)
	}
	if got := m.nodeNames(t); len(got) != 1 || got[0] != "n2" {
		t.Errorf("nodes stored: %v, want [n2]", got)
	}
}

// TestMungeUnknownOriginRefused: munged writes 0.0.0.0 into a credential
// when it cannot resolve its own host. That says nothing of where the
// credential came from, so it speaks for no node, even one whose address
// in Slurm is (wrongly) 0.0.0.0 too.
func TestMungeUnknownOriginRefused(t *testing.T) {
	m := newMungeEnv(t)
	m.nodes.nodes = append(m.nodes.nodes, KnownNode{Name: "n3", Addrs: []string{"0.0.0.0", ""}})
	nowhere := m.realm.Start("0.0.0.0")
	_, err := m.as(nowhere).PostReport(context.Background(), report("n3", "", 1))
	wantDenied(t, "a credential with origin 0.0.0.0 posting n3's report", err)
	if got := m.nodeNames(t); len(got) != 0 {
		t.Errorf("nodes stored: %v, want none", got)
	}
}

// TestMungeDownIsUnavailable: when the coordinator's own munged does not
// answer, nothing is known of the credential: a 503 to try again, not the
// refusal that made agents report a bad token while munged restarted.
func TestMungeDownIsUnavailable(t *testing.T) {
	realm := mungetest.New(t)
	n1 := realm.Start("127.0.0.2")
	nodes := &fixedNodes{nodes: []KnownNode{{Name: "n1", Addrs: []string{"127.0.0.2", ""}}}}
	gone := filepath.Join(t.TempDir(), "munge.socket") // nothing listens
	env := newEnv(t, Config{MungeSocket: gone, Nodes: nodes}, testTokens)
	c := &api.Client{BaseURL: env.url, Auth: munge.Authenticator{Codec: n1}}
	_, err := c.PostReport(context.Background(), report("n1", "", 1))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != api.CodeUnavailable {
		t.Fatalf("a report while the coordinator's munged is down: %v; want 503 %s", err, api.CodeUnavailable)
	}
}

func TestMungeReplayedCredentialRefused(t *testing.T) {
	m := newMungeEnv(t)
	body, _ := json.Marshal(report("n1", "", 1))
	auth := credFor(t, m.n1, 0, http.MethodPost, "/v1/reports", body)
	if code, text := m.raw(t, http.MethodPost, "/v1/reports", body, auth); code != http.StatusAccepted {
		t.Fatalf("first use of the credential: %d %s", code, text)
	}
	// A later report (seq 2) would be stored if the credential were taken.
	code, text := m.raw(t, http.MethodPost, "/v1/reports", body, auth)
	if code != 401 {
		t.Errorf("the same credential again: %d %s, want 401", code, text)
	}
	// Nor may a captured credential carry another body.
	body2, _ := json.Marshal(report("n1", "", 2))
	auth2 := credFor(t, m.n1, 0, http.MethodPost, "/v1/reports", body)
	if code, text := m.raw(t, http.MethodPost, "/v1/reports", body2, auth2); code != 401 {
		t.Errorf("a fresh credential made for another body: %d %s, want 401", code, text)
	}
}

// TestMungeSharedTokensSpeakForNoNode: with munge on, the admin token no
// longer lets its holder report for any node, the token every agent once
// shared is nothing, and a made-up bearer token reads nothing.
func TestMungeSharedTokensSpeakForNoNode(t *testing.T) {
	m := newMungeEnv(t)
	for _, c := range []*api.Client{m.client("agent-secret"), m.admin} {
		_, err := c.PostReport(context.Background(), report("n1", "", 1))
		wantDenied(t, "a shared token posting n1's report", err)
	}
	if got := m.nodeNames(t); len(got) != 0 {
		t.Errorf("nodes stored: %v, want none", got)
	}
	if code, _ := m.raw(t, http.MethodGet, "/v1/status", nil, "Bearer made-up"); code != 401 {
		t.Errorf("status with a made-up token: %d, want 401", code)
	}
	if _, err := m.admin.Status(context.Background()); err != nil {
		t.Errorf("status with the admin token: %v", err)
	}
}

func TestMungeNonRootCannotReport(t *testing.T) {
	m := newMungeEnv(t)
	body, _ := json.Marshal(report("n1", "", 1))
	code, text := m.raw(t, http.MethodPost, "/v1/reports", body, credFor(t, m.n1, 65534, http.MethodPost, "/v1/reports", body))
	if code != 401 || !bytes.Contains([]byte(text), []byte(errDenied.Message)) {
		t.Errorf("nobody's credential on n1 posting n1's report: %d %s, want 401 and the one refusal", code, text)
	}
	if got := m.nodeNames(t); len(got) != 0 {
		t.Errorf("nodes stored: %v, want none", got)
	}
}

func TestMungeAdminByUID(t *testing.T) {
	m := newMungeEnv(t)
	model := api.Model{Name: "llama", Source: "/models/llama.gguf"}
	body, _ := json.Marshal(model)
	path := "/v1/models/llama"
	code, text := m.raw(t, http.MethodPut, path, body, credFor(t, m.n1, nonAdminUID, http.MethodPut, path, body))
	if code != 401 || !bytes.Contains([]byte(text), []byte(errDenied.Message)) {
		t.Errorf("catalog change by nobody: %d %s, want 401 and the one refusal", code, text)
	}
	if models, _ := m.db.Models(context.Background()); len(models) != 0 {
		t.Fatalf("catalog after a refused change: %v", models)
	}
	// SlurmUser is an admin by default, from any host.
	if code, text := m.raw(t, http.MethodPut, path, body, credFor(t, m.n2, slurmUserUID, http.MethodPut, path, body)); code != http.StatusCreated {
		t.Errorf("catalog change by SlurmUser: %d %s, want 201", code, text)
	}
	// A member of admin_groups (nogroup) is one, by the credential's group.
	if code, text := m.raw(t, http.MethodDelete, path, nil, credFor(t, m.n1, 65534, http.MethodDelete, path, nil)); code != http.StatusNoContent {
		t.Errorf("catalog change by a member of admin_groups: %d %s, want 204", code, text)
	}
	if code, text := m.raw(t, http.MethodPut, path, body, credFor(t, m.n2, slurmUserUID, http.MethodPut, path, body)); code != http.StatusCreated {
		t.Fatalf("catalog change by SlurmUser: %d %s, want 201", code, text)
	}
	// Root too, through the client.
	if err := m.as(m.n1).DeleteModel(context.Background(), "llama"); err != nil {
		t.Errorf("catalog change by root: %v", err)
	}
}

func TestMungeReadsNeedACredential(t *testing.T) {
	m := newMungeEnv(t)
	code, _ := m.raw(t, http.MethodGet, "/v1/status", nil, "")
	if code != 401 {
		t.Errorf("status without a credential: %d, want 401", code)
	}
	code, text := m.raw(t, http.MethodGet, "/v1/status", nil, credFor(t, m.n2, 65534, http.MethodGet, "/v1/status", nil))
	if code != 200 {
		t.Errorf("status with nobody's credential: %d %s, want 200", code, text)
	}
}

// TestMungeFabricatedNodesRefused: 2,000 made-up names, each with a real
// root credential, store nothing and read Slurm's list only a few times.
func TestMungeFabricatedNodesRefused(t *testing.T) {
	m := newMungeEnv(t)
	c := m.as(m.n1)
	for i := range 2000 {
		_, err := c.PostReport(context.Background(), report(fmt.Sprintf("fake%04d", i), "", 1))
		if err == nil {
			t.Fatalf("report for fake%04d was taken", i)
		}
		if i == 0 {
			wantDenied(t, "a made-up node", err)
		}
	}
	if got := m.nodeNames(t); len(got) != 0 {
		t.Errorf("%d nodes stored, want none", len(got))
	}
	if n := m.nodes.reads.Load(); n > 3 {
		t.Errorf("the node list was read %d times for 2,000 made-up names; want it read at most every %v", n, knownNodesMinAge)
	}
}

func TestNodesRm(t *testing.T) {
	e := newEnv(t, Config{}, testTokens)
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if _, err := e.agent.PostReport(ctx, report(n, "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	err := e.agent.DeleteNode(ctx, "n1")
	if code, _ := apiCode(err); code != 403 && code != 401 {
		t.Errorf("nodes rm with the agent token: %v, want refused", err)
	}
	if err := e.admin.DeleteNode(ctx, "n1"); err != nil {
		t.Fatalf("nodes rm n1: %v", err)
	}
	if got := nodeNames(t, e.db); len(got) != 1 || got[0] != "n2" {
		t.Errorf("nodes after nodes rm n1: %v, want n2 alone", got)
	}
	e.srv.view.mu.RLock()
	_, inView := e.srv.view.nodes["n1"]
	e.srv.view.mu.RUnlock()
	if inView {
		t.Errorf("n1 is still in the view that status and placement read")
	}
	if code, _ := apiCode(e.admin.DeleteNode(ctx, "n1")); code != 404 {
		t.Errorf("nodes rm of a node not there: %d, want 404", code)
	}
	// It comes back with its next report, even one that counts lower.
	if ans, err := e.agent.PostReport(ctx, report("n1", "", 0)); err != nil || ans.Result != "stored" {
		t.Errorf("n1 reporting after nodes rm: %+v, %v; want stored", ans, err)
	}
}

func TestNodesThatLeftSlurmAreForgotten(t *testing.T) {
	m := newMungeEnv(t)
	ctx := context.Background()
	for _, n := range []struct {
		name  string
		codec munge.Codec
	}{{"n1", m.n1}, {"n2", m.n2}} {
		if _, err := m.as(n.codec).PostReport(ctx, report(n.name, "", 1)); err != nil {
			t.Fatal(err)
		}
	}
	// n2 leaves Slurm's list; n1 keeps reporting.
	m.nodes.mu.Lock()
	m.nodes.nodes = m.nodes.nodes[:1]
	m.nodes.mu.Unlock()
	m.clock.set(t0.Add(DefaultForgetAfter / 2))
	if _, err := m.as(m.n1).PostReport(ctx, report("n1", "", 2)); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, m, "n1,n2") // silent for less than forget_after: kept
	m.clock.set(t0.Add(DefaultForgetAfter + time.Minute))
	if _, err := m.as(m.n1).PostReport(ctx, report("n1", "", 3)); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, m, "n1")
}

// waitNodes waits until the stored nodes are want (names joined by ','),
// for the forgetting that runs beside the report which read the list.
func waitNodes(t *testing.T, m *mungeEnv, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The forgetting runs after the list is read; it holds forgetting
		// while it works.
		got := strings.Join(m.nodeNames(t), ",")
		if got == want && !m.srv.forgetting.Load() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored nodes: %s, want %s", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestNodeTokens: without munge, each node's own token speaks for that
// node alone, and making a new one revokes the old.
func TestNodeTokens(t *testing.T) {
	e := newEnv(t, Config{}, Tokens{Admin: testTokens.Admin})
	ctx := context.Background()
	made, err := e.admin.NewNodeToken(ctx, "n1")
	if err != nil || made.Node != "n1" || made.Token == "" {
		t.Fatalf("nodes token n1: %+v, %v", made, err)
	}
	n1 := e.client(made.Token)
	if ans, err := n1.PostReport(ctx, report("n1", "", 1)); err != nil || ans.Result != "stored" {
		t.Fatalf("n1's report with n1's token: %+v, %v", ans, err)
	}
	wantDenied(t, "n1's token posting n2's report", func() error { _, err := n1.PostReport(ctx, report("n2", "", 1)); return err }())
	wantDenied(t, "n1's token changing the catalog", n1.DeleteModel(ctx, "llama"))
	if got := nodeNames(t, e.db); len(got) != 1 || got[0] != "n1" {
		t.Errorf("nodes stored: %v, want [n1]", got)
	}
	again, err := e.admin.NewNodeToken(ctx, "n1")
	if err != nil || again.Token == made.Token {
		t.Fatalf("a second token for n1: %+v, %v", again, err)
	}
	if _, err := n1.PostReport(ctx, report("n1", "", 2)); err == nil {
		t.Errorf("n1's old token still posts after a new one was made")
	}
	if _, err := e.client(again.Token).PostReport(ctx, report("n1", "", 3)); err != nil {
		t.Errorf("n1's new token: %v", err)
	}
	// Only an admin makes them.
	if _, err := e.client(again.Token).NewNodeToken(ctx, "n2"); err == nil {
		t.Errorf("a node's token made a token for n2")
	}
}

// TestMungeSignedSourceOnlyToFetchers: with munge, a node's root (its agent,
// its Prolog) is sent a signed source whole, since it must fetch it; any
// other cluster user reads it redacted. Before munge callers were known
// here, the agent got the redacted URL and no node could fetch the model.
func TestMungeSignedSourceOnlyToFetchers(t *testing.T) {
	m := newMungeEnv(t)
	const src = "https://origin.example/w.gguf?sig=s3cret"
	if _, err := m.as(m.coord).PutModel(context.Background(), api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	models, err := m.as(m.n1).Models(context.Background())
	if err != nil || len(models) != 1 || models[0].Source != src {
		t.Errorf("a node's root read %+v, %v; want the source whole", models, err)
	}
	code, text := m.raw(t, http.MethodGet, "/v1/models", nil, credFor(t, m.n2, nonAdminUID, http.MethodGet, "/v1/models", nil))
	if code != 200 || strings.Contains(text, "s3cret") {
		t.Errorf("a cluster user read %d %s; want 200 without the signature", code, text)
	}
}

// TestMungePinOnlyFromItsNode: the first pin decides the bytes every node
// loads, so with munge a node pins in its own name only, and a user who is
// not root on a node pins nothing.
func TestMungePinOnlyFromItsNode(t *testing.T) {
	m := newMungeEnv(t)
	const src = "https://origin.example/w.gguf"
	ctx := context.Background()
	if _, err := m.as(m.coord).PutModel(ctx, api.Model{Name: "m", Source: src}); err != nil {
		t.Fatal(err)
	}
	pin := api.PinRequest{Source: src, SHA256: strings.Repeat("a", 64), Node: "n2"}
	_, err := m.as(m.n1).Pin(ctx, pin)
	wantDenied(t, "n1's root pinning in n2's name", err)
	body, _ := json.Marshal(pin)
	if code, text := m.raw(t, http.MethodPost, "/v1/pins", body, credFor(t, m.n2, nonAdminUID, http.MethodPost, "/v1/pins", body)); code != 401 {
		t.Errorf("a user on n2 pinning: %d %s, want 401", code, text)
	}
	pin.Node = "n1"
	if got, err := m.as(m.n1).Pin(ctx, pin); err != nil || got.Pinned != pin.SHA256 {
		t.Errorf("n1 pinning in its own name: %+v, %v", got, err)
	}
}
