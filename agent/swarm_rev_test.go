package agent

// Models of several files through the fabric's swarm (issue 25, phase 2):
// real agents (each with its chunk server on 127.0.0.K and its own munged),
// the real coordinator on a sqlite file, and the Hub stand-in, whose resolve
// answers an LFS file with a redirect to its CDN on another port and which
// counts the bytes it serves to each node.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge/mungetest"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// revChunk is the swarm chunk of these tests (the coordinator's
// swarm_min_chunk): a dozen files of a few of them keep each test short.
const revChunk = 1 << 20

// twelveFiles is a repository of 12 files, as save_pretrained and a
// tokenizer leave one: four shards and their index, configs, tokenizer
// files (two large enough to span chunks, kept in git as the Hub keeps a
// text file under 10 MB) and a chat template. No size is a multiple of a
// chunk, so chunks span file boundaries all along the revision.
func twelveFiles() map[string][]byte {
	shard := func(n int) []byte {
		b := safetensorsBytes(n)
		rand.Read(b[16:])
		return b
	}
	text := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		for i := range b {
			b[i] = 'a' + b[i]%26
		}
		return b
	}
	return map[string][]byte{
		"chat_template.jinja":              text(1234),
		"config.json":                      []byte(`{"model_type":"llama","hidden_size":64}`),
		"generation_config.json":           []byte(`{"do_sample":false}`),
		"merges.txt":                       text(revChunk/2 + 4321),
		"model-00001-of-00004.safetensors": shard(5*revChunk/2 + 1234),
		"model-00002-of-00004.safetensors": shard(3*revChunk + 77),
		"model-00003-of-00004.safetensors": shard(revChunk - 5),
		"model-00004-of-00004.safetensors": shard(2*revChunk + 999),
		"model.safetensors.index.json":     []byte(`{"weight_map":{"a":"model-00001-of-00004.safetensors","b":"model-00002-of-00004.safetensors","c":"model-00003-of-00004.safetensors","d":"model-00004-of-00004.safetensors"}}`),
		"special_tokens_map.json":          []byte(`{"eos_token":"</s>"}`),
		"tokenizer.json":                   text(3*revChunk/2 + 17),
		"tokenizer_config.json":            []byte(`{"model_max_length":2048}`),
	}
}

// hubEntry is repo at its main commit as `llmgw models add` registers it,
// every file selected, each with the digest the Hub publishes.
func hubEntry(t testing.TB, h *hubtest.Hub, repo string) catalog.Hub {
	t.Helper()
	commit := h.Branch(repo, "main")
	hb := catalog.Hub{Repo: repo, Revision: "main", Commit: commit}
	files := h.Files(repo, commit)
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := catalog.HubFile{Path: p, Size: int64(len(files[p]))}
		if hubtest.IsLFS(p, len(files[p])) {
			s := sha256.Sum256(files[p])
			f.SHA256 = hex.EncodeToString(s[:])
		} else {
			f.Blob = catalog.GitBlobID(files[p])
		}
		hb.Files = append(hb.Files, f)
	}
	if err := catalog.CheckHub(hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

// hubFabric is one fabric of agents and a Hub model in the catalog.
type hubFabric struct {
	t     *testing.T
	e     *fabricEnv
	hub   *hubtest.Hub
	hb    catalog.Hub
	src   string
	files map[string][]byte
	size  int64
	// cut, by agent, ends its coordinator traffic: a killed process's
	// reports, its Gone above all, never arrive.
	cut map[string]*atomic.Bool
	// stop, by agent, ends its Run: its chunk server closes.
	stop map[string]func()
}

// newHubFabric serves files as org/twelve, registers it, and starts a
// coordinator for nodes nK on 127.0.0.K (ks), none running yet.
func newHubFabric(t *testing.T, files map[string][]byte, ks ...int) *hubFabric {
	realm := mungetest.New(t)
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	h.Commit("org/twelve", "main", files)
	x := &hubFabric{t: t, hub: h, hb: hubEntry(t, h, "org/twelve"), files: files, cut: map[string]*atomic.Bool{}, stop: map[string]func(){}}
	x.src = catalog.HubSource(x.hb.Repo, x.hb.Commit)
	x.size = catalog.HubSize(x.hb)
	ips := map[string]string{}
	for _, k := range ks {
		ips[fmt.Sprintf("n%d", k)] = fmt.Sprintf("127.0.0.%d", k)
	}
	x.e = emptyFabric(t, realm, nil, "", revChunk)
	x.e.url = startCoordinator(t, realm, ips, revChunk)
	admin := &api.Client{BaseURL: x.e.url, Token: "admin-secret"}
	if _, err := admin.PutModel(context.Background(), api.Model{Name: "twelve", Source: x.src, Hub: &x.hb}); err != nil {
		t.Fatal(err)
	}
	return x
}

// cutTransport fails every request once cut: a coordinator the node can
// no longer reach.
type cutTransport struct {
	cut  *atomic.Bool
	next http.RoundTripper
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, fmt.Errorf("node killed")
	}
	return c.next.RoundTrip(r)
}

// agent starts node nK's agent as the daemon runs (its chunk server on
// 127.0.0.K:port, its own munged, reporting to the coordinator), with its
// cache in dir when dir is set (a restart), and waits for its first report
// to be taken.
func (x *hubFabric) agent(k, port int, dir string) *Agent {
	t := x.t
	ip := fmt.Sprintf("127.0.0.%d", k)
	cfg := testConfig(t)
	cfg.Node, cfg.Fabric = fmt.Sprintf("n%d", k), "ib-a"
	cfg.Coordinator = x.e.url
	cfg.MungeSocket = x.e.realm.Start(ip).Socket()
	if port == 0 {
		port = freePort(t, ip)
	}
	cfg.PeerAddr = fmt.Sprintf("%s:%d", ip, port)
	cfg.HFEndpoint = x.hub.URL
	if dir != "" {
		cfg.CacheDir = dir
	}
	a := newTestAgent(t, cfg)
	// The Hub knows a node by the address it connects from.
	a.swarm.origin = &http.Client{Transport: &http.Transport{DisableCompression: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
	cut := &atomic.Bool{}
	next := a.http.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	a.http.Transport = cutTransport{cut: cut, next: next}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	t.Cleanup(stop)
	x.cut[cfg.Node] = cut
	x.stop[cfg.Node] = stop
	until(t, 10*time.Second, cfg.Node+"'s first report taken", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.result.LastOK.IsZero()
	})
	return a
}

// kill stops a's agent as SIGKILL would: its coordinator traffic ends
// first (no Gone arrives), then its fetch (end: the ensure's cancel) and
// its chunk server with every connection.
func (x *hubFabric) kill(a *Agent, end func()) {
	x.cut[a.cfg.Node].Store(true)
	end()
	x.stop[a.cfg.Node]()
}

// ensure runs a's ensure of the model, as its Prolog asks.
func (x *hubFabric) ensure(ctx context.Context, a *Agent) (string, error) {
	return a.ensure(ctx, x.request(a), nil)
}

// request is the ensure of the model a Prolog sends.
func (x *hubFabric) request(*Agent) api.EnsureRequest {
	return api.EnsureRequest{Source: x.src, Hub: &x.hb}
}

// ensureAll runs each agent's ensure of its request at once, as the
// Prologs of a job's nodes do, each within a minute.
func ensureAll(agents []*Agent, request func(*Agent) api.EnsureRequest) (paths []string, errs []error) {
	paths, errs = make([]string, len(agents)), make([]error, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			paths[i], errs[i] = a.ensure(ctx, request(a), nil)
		})
	}
	wg.Wait()
	return paths, errs
}

// reference is the snapshot as phase 1 writes it (EnsureHub, from the Hub,
// on no swarm), listed as tree lists it.
func (x *hubFabric) reference() []string {
	t := x.t
	dir := t.TempDir()
	f := &fetch.Fetcher{CacheDir: filepath.Join(dir, "cache"), LockDir: filepath.Join(dir, "locks"), HFEndpoint: x.hub.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hf := filepath.Join(dir, "hf")
	if _, err := f.EnsureHub(ctx, hf, x.hb); err != nil {
		t.Fatal(err)
	}
	return hubTree(t, catalog.HubRepoDir(hf, x.hb.Repo))
}

// check says that a's snapshot is the reference, every file verified.
func (x *hubFabric) check(a *Agent, want []string) {
	t := x.t
	t.Helper()
	hf := a.Config().HFCacheDir()
	snap := catalog.HubSnapshotDir(hf, x.hb.Repo, x.hb.Commit)
	for p, b := range x.files {
		got, err := os.ReadFile(filepath.Join(snap, p))
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s: %s through its snapshot link is not the Hub's file (%v)", a.cfg.Node, p, err)
		}
	}
	if got := hubTree(t, catalog.HubRepoDir(hf, x.hb.Repo)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: its cache is not the one phase 1 writes:\n%s\n--- want\n%s", a.cfg.Node, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// hubTree lists a Hugging Face cache's repository: every entry of blobs/
// with its content's git blob id, every snapshot entry with its link,
// every ref with its content, and anything else there by name.
func hubTree(t testing.TB, repoDir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(repoDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == repoDir {
			return err
		}
		rel, _ := filepath.Rel(repoDir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+" -> "+l)
		case fi.Mode().IsRegular() && strings.HasPrefix(rel, "blobs/"):
			b, _ := os.ReadFile(p)
			out = append(out, rel+" "+catalog.GitBlobID(b))
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out = append(out, rel+" = "+string(b))
		default:
			out = append(out, rel+"/")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// verified says how many chunks of the revision each agent holds verified.
func (x *hubFabric) verified(agents ...*Agent) string {
	sum := catalog.RevisionDigest(catalog.HubRevision(x.hb))
	var out []string
	for _, a := range agents {
		n := 0
		if h := a.swarm.files.get(sum); h != nil {
			h.mu.Lock()
			n = count(h.have)
			h.mu.Unlock()
		}
		out = append(out, fmt.Sprintf("%s %d", a.cfg.Node, n))
	}
	return strings.Join(out, ", ")
}

// servedTo is what the Hub served each node, as "nK BYTES".
func (x *hubFabric) servedTo() string {
	var out []string
	for ip, n := range x.hub.ServedTo() {
		out = append(out, fmt.Sprintf("n%s %d", ip[strings.LastIndexByte(ip, '.')+1:], n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// TestSwarmHubRepository: a 12-file repository, sizes no multiple of a
// chunk, fetched by three agents of one fabric through their Prologs' ensure
// at once: the Hub serves the revision once (one origin read per fabric),
// every file on every node is verified and in place, and each node's cache
// is the tree phase 1 writes (blobs by digest, relative links, refs/main).
// On main every agent read the whole repository from the Hub (issue 25:
// "models of several files and hf: sources are not swarmed").
func TestSwarmHubRepository(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 111, 112, 113)
	want := x.reference()
	base := x.hub.Served()
	// The CDN slowed so that the seed is still reading when the others
	// join: the revision goes through the pipeline, not copy after copy.
	x.hub.Throttle(6 << 20)
	var agents []*Agent
	for _, k := range []int{111, 112, 113} {
		agents = append(agents, x.agent(k, 0, ""))
	}
	paths, errs := ensureAll(agents, x.request)
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		if want := catalog.HubSnapshotDir(a.Config().HFCacheDir(), x.hb.Repo, x.hb.Commit); paths[i] != want {
			t.Errorf("%s: ensure answered %s, want the snapshot %s", a.cfg.Node, paths[i], want)
		}
		x.check(a, want)
	}
	served := x.hub.Served() - base
	t.Logf("the Hub served %d bytes for a %d-byte revision (%.3f copies); by node: %s", served, x.size, float64(served)/float64(x.size), x.servedTo())
	if served > x.size {
		t.Errorf("the Hub served %d bytes, %.2f copies of the %d-byte revision; one per fabric", served, float64(served)/float64(x.size), x.size)
	}
	// Honest members refute nobody: a revision's files are each checked
	// against their own digests, never the bytes end to end against the
	// revision's key (merged with issue 24's whole-file check, every member
	// that read from peers "failed the pin" and refuted its seed).
	if st := swarmStatusOf(t, x.e.url, catalog.RevisionDigest(catalog.HubRevision(x.hb))); st == nil || len(st.Refuted) > 0 || len(st.LeaseRevoked) > 0 {
		t.Errorf("status of the revision's swarm: %+v; want it listed, nobody refuted, no lease revoked", st)
	}
}

// TestSwarmHubSeedKilledMidFile: the node reading the Hub for the fabric
// dies (no Gone, its chunk server gone) in the middle of a file; another
// member takes the lease and reads on from the first chunk nobody holds,
// and the Hub serves the revision about once: what the dead seed read and
// nobody else had verified, at most. Restarted on its cache, the dead node
// resumes from what it had verified and reads the rest from its peers.
func TestSwarmHubSeedKilledMidFile(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 121, 122, 123)
	want := x.reference()
	base := x.hub.Served()
	x.hub.Throttle(3 << 20)
	seedDir := t.TempDir()
	seed := x.agent(121, 0, seedDir)
	others := []*Agent{x.agent(122, 0, ""), x.agent(123, 0, "")}
	sctx, killSeed := context.WithCancel(context.Background())
	seedDone := make(chan error, 1)
	go func() {
		_, err := x.ensure(sctx, seed)
		seedDone <- err
	}()
	until(t, 10*time.Second, "the seed reads the Hub", func() bool { return x.hub.Served() > base })
	var wg sync.WaitGroup
	errs := make([]error, len(others))
	for i, a := range others {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_, errs[i] = x.ensure(ctx, a)
		})
	}
	// Mid-file: well into the second shard (the files are in path order,
	// and the first shard comes after the chat template and the config
	// files).
	until(t, 30*time.Second, "the seed is in the middle of the revision", func() bool { return x.hub.Served()-base > x.size/2 })
	x.kill(seed, killSeed)
	<-seedDone
	t.Logf("seed killed after the Hub served %d of %d bytes; the others held %s", x.hub.Served()-base, x.size, x.verified(others...))
	wg.Wait()
	for i, a := range others {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		x.check(a, want)
	}
	served := x.hub.Served() - base
	t.Logf("the Hub served %d bytes (%.3f copies); by node: %s", served, float64(served)/float64(x.size), x.servedTo())
	// The dead seed's unpublished chunk, and its live stream, are all a
	// second reader may read again: two chunks.
	if served > x.size+2*revChunk {
		t.Errorf("the Hub served %d bytes for a %d-byte revision when its seed died; one copy and at most two chunks of it again", served, x.size)
	}
	// The dead node again, on its cache, as after a reboot: what it
	// verified is kept, the rest comes from its peers, not the Hub.
	before := x.hub.Served()
	again := x.agent(121, 0, seedDir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := x.ensure(ctx, again); err != nil {
		t.Fatalf("the restarted seed: %v", err)
	}
	x.check(again, want)
	if n := x.hub.Served() - before; n != 0 {
		t.Errorf("the restarted seed read %d bytes from the Hub; its peers hold the revision", n)
	}
}

// TestSwarmHubWrongBlobOnDisk: a member whose blobs/ holds a file of the
// right name and size but other bytes (another tool's, or damage) does not
// take them for the file: it does not mark their chunks, does not serve
// them, fetches the file through the swarm, and puts the verified blob in
// place of the wrong one. The fabric still reads the Hub once.
func TestSwarmHubWrongBlobOnDisk(t *testing.T) {
	files := twelveFiles()
	x := newHubFabric(t, files, 131, 132, 133)
	want := x.reference()
	base := x.hub.Served()
	x.hub.Throttle(6 << 20)
	var shard catalog.HubFile
	for _, f := range x.hb.Files {
		if f.Path == "model-00002-of-00004.safetensors" {
			shard = f
		}
	}
	liarDir := t.TempDir()
	blob := catalog.HubBlobPath(filepath.Join(liarDir, catalog.DefaultHFDir), x.hb.Repo, shard.BlobName())
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		t.Fatal(err)
	}
	wrong := bytes.Clone(files[shard.Path])
	wrong[len(wrong)/2] ^= 0xff
	if err := os.WriteFile(blob, wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	// The member with the wrong blob asks first, so that it takes the
	// lease: were it to trust the blob, its chunks would be the fabric's.
	agents := []*Agent{x.agent(131, 0, liarDir), x.agent(132, 0, ""), x.agent(133, 0, "")}
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i, a := range agents {
		if i == 1 {
			until(t, 10*time.Second, "the first member reads the Hub", func() bool { return x.hub.Served() > base })
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, errs[i] = x.ensure(ctx, a)
		})
	}
	wg.Wait()
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		x.check(a, want)
	}
	if got, _ := os.ReadFile(blob); !bytes.Equal(got, files[shard.Path]) {
		t.Error("the wrong blob is still in place")
	}
	served := x.hub.Served() - base
	t.Logf("the Hub served %d bytes (%.3f copies); by node: %s", served, float64(served)/float64(x.size), x.servedTo())
	if served > x.size {
		t.Errorf("the Hub served %d bytes for a %d-byte revision; one copy", served, x.size)
	}
}

// TestSwarmHubRepositoryHeldFilesStayLocal: a node that holds some of the
// revision's files already (blobs shared with an earlier revision) marks
// their chunks as its own and the fabric reads the Hub only for the rest:
// a new revision that changes one file costs the fabric that file.
func TestSwarmHubRepositoryHeldFilesStayLocal(t *testing.T) {
	files := twelveFiles()
	x := newHubFabric(t, files, 141, 142)
	dirs := []string{t.TempDir(), t.TempDir()}
	var agents []*Agent
	for i, k := range []int{141, 142} {
		agents = append(agents, x.agent(k, 0, dirs[i]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range agents {
		if _, err := x.ensure(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// A new commit changes one shard in the middle of the order.
	files["model-00002-of-00004.safetensors"] = safetensorsBytes(3*revChunk + 99)
	rand.Read(files["model-00002-of-00004.safetensors"][16:])
	x.hub.Commit("org/twelve", "main", files)
	x.hb = hubEntry(t, x.hub, "org/twelve")
	x.src = catalog.HubSource(x.hb.Repo, x.hb.Commit)
	admin := &api.Client{BaseURL: x.e.url, Token: "admin-secret"}
	if _, err := admin.PutModel(ctx, api.Model{Name: "twelve", Source: x.src, Hub: &x.hb}); err != nil {
		t.Fatal(err)
	}
	want := x.reference()
	before := x.hub.Served()
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i, a := range agents {
		wg.Go(func() { _, errs[i] = x.ensure(ctx, a) })
	}
	wg.Wait()
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		snap := catalog.HubSnapshotDir(a.Config().HFCacheDir(), x.hb.Repo, x.hb.Commit)
		for p, b := range files {
			if got, err := os.ReadFile(filepath.Join(snap, p)); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: %s is not the new revision's (%v)", a.cfg.Node, p, err)
			}
		}
		_ = i
	}
	_ = want
	if got, changed := x.hub.Served()-before, int64(len(files["model-00002-of-00004.safetensors"])); got != changed {
		t.Errorf("the new revision cost the fabric %d bytes from the Hub, want %d (the changed shard alone); by node: %s", got, changed, x.servedTo())
	}
}

// TestSwarmHubGated: a gated repository the nodes have no token for fails
// every node's ensure with the Hub's words and the setting that gives a
// node its token, rather than wedge the fabric.
func TestSwarmHubGated(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 151, 152)
	x.hub.Gate("org/twelve", "hf_secret")
	agents := []*Agent{x.agent(151, 0, ""), x.agent(152, 0, "")}
	_, errs := ensureAll(agents, x.request)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "hf_token_file") {
			t.Errorf("%s: %v; want the gated repository said, naming hf_token_file", agents[i].cfg.Node, err)
		}
	}
}

// TestSwarmHubRateLimited: the Hub answers the lease holder 429 with
// Retry-After; it waits as told and reads on, and the fabric still reads
// the revision once.
func TestSwarmHubRateLimited(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 161, 162)
	base := x.hub.Served()
	agents := []*Agent{x.agent(161, 0, ""), x.agent(162, 0, "")}
	x.hub.Limit(1, 1)
	start := time.Now()
	_, errs := ensureAll(agents, x.request)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", agents[i].cfg.Node, err)
		}
	}
	if took := time.Since(start); took < time.Second {
		t.Errorf("done in %v; the Hub said Retry-After: 1", took)
	}
	if served := x.hub.Served() - base; served > x.size {
		t.Errorf("the Hub served %d bytes for a %d-byte revision; one copy", served, x.size)
	}
}

// setOrigin serves files by name over http, with ranges, counting what it
// sends each client address.
type setOrigin struct {
	url   string
	files map[string][]byte
	mu    sync.Mutex
	sent  map[string]int64
}

func newSetOrigin(t *testing.T, files map[string][]byte) *setOrigin {
	o := &setOrigin{files: files, sent: map[string]int64{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: o}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	o.url = "http://" + l.Addr().String()
	return o
}

func (o *setOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, ok := o.files[strings.TrimPrefix(r.URL.Path, "/")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	w.Header().Set("ETag", `"v1"`)
	http.ServeContent(&throttled{ResponseWriter: w, rate: 8 << 20, count: func(n int) {
		o.mu.Lock()
		o.sent[host] += int64(n)
		o.mu.Unlock()
	}}, r, "", time.Unix(1e9, 0), bytes.NewReader(b))
}

func (o *setOrigin) total() (n int64, by string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for h, b := range o.sent {
		n += b
		out = append(out, fmt.Sprintf("%s %d", h, b))
	}
	sort.Strings(out)
	return n, strings.Join(out, ", ")
}

// TestSwarmSetModel: a model of several http(s) files, every one pinned,
// fetched by three agents of a fabric through their Prologs' whole-set
// ensure: one origin read for the fabric, each file verified against its
// own pin and in the set directory under its own name. On main every
// node read every file from its origin.
func TestSwarmSetModel(t *testing.T) {
	realm := mungetest.New(t)
	names := []string{"qwen-00001-of-00003.gguf", "qwen-00002-of-00003.gguf", "qwen-00003-of-00003.gguf", "tokenizer.json"}
	sizes := []int{3*revChunk/2 + 11, 2*revChunk - 3, revChunk/3 + 5, 40000}
	files := map[string][]byte{}
	for i, n := range names {
		b := make([]byte, sizes[i])
		rand.Read(b)
		files[n] = b
	}
	o := newSetOrigin(t, files)
	m := api.Model{Name: "qwen"}
	var size int64
	for _, n := range names {
		s := sha256.Sum256(files[n])
		m.Files = append(m.Files, api.File{Source: o.url + "/" + n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(s[:])})
		size += int64(len(files[n]))
	}
	m.Source = m.Files[0].Source
	ks := []int{171, 172, 173}
	ips := map[string]string{}
	for _, k := range ks {
		ips[fmt.Sprintf("n%d", k)] = fmt.Sprintf("127.0.0.%d", k)
	}
	x := &hubFabric{t: t, e: emptyFabric(t, realm, nil, "", revChunk), cut: map[string]*atomic.Bool{}, stop: map[string]func(){}}
	x.e.url = startCoordinator(t, realm, ips, revChunk)
	x.hub = &hubtest.Hub{} // no Hub: the agents' hf_endpoint is unused
	admin := &api.Client{BaseURL: x.e.url, Token: "admin-secret"}
	if _, err := admin.PutModel(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	var agents []*Agent
	for _, k := range ks {
		agents = append(agents, x.agent(k, 0, ""))
	}
	set := catalog.SetName(m)
	paths, errs := ensureAll(agents, func(*Agent) api.EnsureRequest { return api.EnsureRequest{Source: m.Source, Set: set, Files: m.Files} })
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		if want := catalog.SetDir(a.cfg.CacheDir, m); paths[i] != want {
			t.Errorf("%s: ensure answered %s, want the set directory %s", a.cfg.Node, paths[i], want)
		}
		for _, n := range names {
			p := filepath.Join(paths[i], n)
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, files[n]) {
				t.Errorf("%s: %s is not the origin's file (%v)", a.cfg.Node, n, err)
			}
			if sum, _ := catalog.RecordedSHA256(p); sum == "" {
				t.Errorf("%s: %s carries no recorded digest, as a sealed file does", a.cfg.Node, n)
			}
		}
		ents, _ := os.ReadDir(paths[i])
		for _, e := range ents {
			if strings.Contains(e.Name(), ".part") {
				t.Errorf("%s: %s left in the set directory", a.cfg.Node, e.Name())
			}
		}
	}
	got, by := o.total()
	t.Logf("the origin served %d bytes for a %d-byte set (%.3f copies); by node: %s", got, size, float64(got)/float64(size), by)
	if got > size {
		t.Errorf("the origin served %d bytes, %.2f copies of the %d-byte set; one per fabric", got, float64(got)/float64(size), size)
	}
}

// TestSwarmHFFile: one pinned hf: file, fetched by three agents of a
// fabric: one read of the Hub (through its redirect to the CDN), the file
// in each cache under its cache name. On main an hf: source was read from
// the Hub by every node ("only http(s) sources are fetched through the
// swarm").
func TestSwarmHFFile(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 181, 182, 183)
	var f catalog.HubFile
	for _, hf := range x.hb.Files {
		if hf.Path == "model-00002-of-00004.safetensors" {
			f = hf
		}
	}
	src := "hf:org/twelve@" + x.hb.Commit + "/" + f.Path
	admin := &api.Client{BaseURL: x.e.url, Token: "admin-secret"}
	if _, err := admin.PutModel(context.Background(), api.Model{Name: "shard", Source: src, SHA256: f.SHA256, Size: f.Size}); err != nil {
		t.Fatal(err)
	}
	base := x.hub.Served()
	x.hub.Throttle(6 << 20)
	var agents []*Agent
	for _, k := range []int{181, 182, 183} {
		agents = append(agents, x.agent(k, 0, ""))
	}
	paths, errs := ensureAll(agents, func(*Agent) api.EnsureRequest { return api.EnsureRequest{Source: src, SHA256: f.SHA256, Size: f.Size} })
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		if want := catalog.CachePathFor(a.cfg.CacheDir, src); paths[i] != want {
			t.Errorf("%s: ensure answered %s, want %s", a.cfg.Node, paths[i], want)
		}
		if got, err := os.ReadFile(paths[i]); err != nil || !bytes.Equal(got, x.files[f.Path]) {
			t.Errorf("%s: %s is not the Hub's file (%v)", a.cfg.Node, paths[i], err)
		}
	}
	served := x.hub.Served() - base
	t.Logf("the Hub served %d bytes for a %d-byte file (%.3f copies); by node: %s", served, f.Size, float64(served)/float64(f.Size), x.servedTo())
	if served > f.Size {
		t.Errorf("the Hub served %d bytes, %.2f copies of the file; one per fabric", served, float64(served)/float64(f.Size))
	}
}

// TestRevisionRetireWaitsForReaders: the descriptors of a revision's fetch
// are closed only once no chunk server answer reads through them, and no
// answer begins reading through them after the fetch ended. On the bench
// (fanout.sh --hub) a chunk being served as its holder completed was cut
// short when they were closed under it: the reader took the holder for
// dead, the lease passed, and the heir read a chunk from the origin again
// (3.25 copies for three fabrics).
func TestRevisionRetireWaitsForReaders(t *testing.T) {
	r := &revision{}
	rd, err := r.open(false)
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	r.retire(func() { ended.Store(true) })
	if ended.Load() {
		t.Fatal("the descriptors were closed while an answer read through them")
	}
	if _, err := r.open(false); err != errMoving {
		t.Errorf("an answer after the fetch ended: %v, want errMoving (ask again: complete, or gone)", err)
	}
	rd.Close()
	rd.Close()
	if !ended.Load() {
		t.Fatal("the descriptors were not closed after the last answer")
	}
	r2 := &revision{}
	r2.retire(func() { ended.Store(false) })
	if ended.Load() {
		t.Error("with no answer reading, retire must close at once")
	}
}

// TestSwarmHubSameBlobTwice: a repository with two paths of the same bytes
// (one blob, as the Hub names it) and empty files: the blob is written,
// verified and named once, both paths link to it, and the fetch does not
// wait on its own lock (it did, until its deadline: the blob's lock taken
// once per path).
func TestSwarmHubSameBlobTwice(t *testing.T) {
	files := map[string][]byte{
		"a/config.json":     []byte(`{"model_type":"llama"}`),
		"b/config.json":     []byte(`{"model_type":"llama"}`),
		"a/__init__.py":     {},
		"b/__init__.py":     {},
		"model.safetensors": safetensorsBytes(3*revChunk/2 + 7),
	}
	rand.Read(files["model.safetensors"][16:])
	x := newHubFabric(t, files, 201, 202)
	want := x.reference()
	base := x.hub.Served()
	agents := []*Agent{x.agent(201, 0, ""), x.agent(202, 0, "")}
	_, errs := ensureAll(agents, x.request)
	for i, a := range agents {
		if errs[i] != nil {
			t.Fatalf("%s: %v", a.cfg.Node, errs[i])
		}
		x.check(a, want)
	}
	if served := x.hub.Served() - base; served > x.size {
		t.Errorf("the Hub served %d bytes for a %d-byte revision; one copy", served, x.size)
	}
}

// TestSwarmHubClaimIsTheNodesBudget: while a revision comes through the
// swarm, its missing bytes are claimed in the node's record of space, the
// one every fetch and eviction reads (issue 27's budget), and the claim is
// gone when the fetch ends.
func TestSwarmHubClaimIsTheNodesBudget(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 211)
	x.hub.Throttle(4 << 20)
	a := x.agent(211, 0, "")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := x.ensure(ctx, a)
		done <- err
	}()
	f := a.fetcherLocked()
	blobs := filepath.Join(catalog.HubRepoDir(a.Config().HFCacheDir(), x.hb.Repo), "blobs")
	var claimed int64
	until(t, 20*time.Second, "the revision's room claimed in the node's record", func() bool {
		claimed, _ = f.Claimed(context.Background(), blobs)
		return claimed > x.size/2
	})
	t.Logf("claimed %d bytes of a %d-byte revision while it came", claimed, x.size)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Claimed(context.Background(), blobs); n != 0 {
		t.Errorf("%d bytes still claimed after the fetch ended", n)
	}
}
