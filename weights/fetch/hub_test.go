package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// tinyRepo is a sharded checkpoint with its configs, tokenizer and a
// subfolder, as save_pretrained and a chat template leave it.
func tinyRepo() map[string][]byte {
	index, _ := json.Marshal(map[string]any{"weight_map": map[string]string{
		"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
	return map[string][]byte{
		"config.json":                          []byte(`{"model_type":"llama"}`),
		"generation_config.json":               []byte(`{"do_sample":false}`),
		"model-00001-of-00002.safetensors":     bytes.Repeat([]byte("1"), 300<<10),
		"model-00002-of-00002.safetensors":     bytes.Repeat([]byte("2"), 200<<10),
		"model.safetensors.index.json":         index,
		"tokenizer.json":                       []byte(`{"version":"1.0"}`),
		"tokenizer_config.json":                []byte(`{}`),
		"additional_chat_templates/tool.jinja": []byte("{{ tools }}"),
		"README.md":                            []byte("not selected"),
	}
}

type hubFixture struct {
	h     *hubtest.Hub
	f     *Fetcher
	cache string // the Hugging Face cache
}

func newHubFixture(t *testing.T) *hubFixture {
	t.Helper()
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	f := testFetcher(t)
	f.HFEndpoint = h.URL
	return &hubFixture{h: h, f: f, cache: filepath.Join(f.CacheDir, catalog.DefaultHFDir)}
}

// model is repo at main's commit now as `llmgw models add` registers it
// (weights/hub, which links this package, so spelt out here): every file
// but the README, each with the digest the Hub publishes.
func (x *hubFixture) model(t *testing.T, repo string) catalog.Hub {
	t.Helper()
	commit := x.h.Branch(repo, "main")
	hb := catalog.Hub{Repo: repo, Revision: "main", Commit: commit}
	files := x.h.Files(repo, commit)
	paths := make([]string, 0, len(files))
	for p := range files {
		if p != "README.md" {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := catalog.HubFile{Path: p, Size: int64(len(files[p]))}
		if hubtest.IsLFS(p, len(files[p])) {
			f.SHA256 = sha256Hex(files[p])
		} else {
			f.Blob = catalog.GitBlobID(files[p])
		}
		if f.BlobName() != x.h.BlobName(repo, commit, p) {
			t.Fatalf("%s: blob %s, the stand-in names it %s", p, f.BlobName(), x.h.BlobName(repo, commit, p))
		}
		hb.Files = append(hb.Files, f)
	}
	if err := catalog.CheckHub(hb); err != nil {
		t.Fatal(err)
	}
	return hb
}

func (x *hubFixture) ensure(t *testing.T, hb catalog.Hub) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := x.f.EnsureHub(ctx, x.cache, hb)
	if err != nil {
		t.Fatalf("EnsureHub = %v", err)
	}
	return p
}

// tree lists what a Hugging Face cache's repository holds: every blob by
// name and content digest, every snapshot entry with its link, every ref
// with its content. Two caches that list the same are the same.
func tree(t *testing.T, repoDir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(repoDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
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
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestHubModelLayout: the files land as huggingface_hub lays them out:
// blobs named by the Hub's digests, relative links from the commit's
// snapshot (subfolders kept), refs/main holding the commit and nothing
// else; and a second ensure reads nothing from the origin.
func TestHubModelLayout(t *testing.T) {
	x := newHubFixture(t)
	commit := x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	snap := x.ensure(t, hb)
	if want := filepath.Join(x.cache, "models--org--tiny", "snapshots", commit); snap != want {
		t.Fatalf("snapshot %s, want %s", snap, want)
	}
	for _, file := range hb.Files {
		link := filepath.Join(snap, file.Path)
		target, err := os.Readlink(link)
		if err != nil || target != catalog.HubLinkTarget(file.Path, file.BlobName()) {
			t.Errorf("%s -> %q, %v; want a relative link to blobs/%s", file.Path, target, err, file.BlobName())
		}
		got, _ := os.ReadFile(link)
		if !bytes.Equal(got, tinyRepo()[file.Path]) {
			t.Errorf("%s reads other bytes through its link", file.Path)
		}
		if name := x.h.BlobName("org/tiny", commit, file.Path); file.BlobName() != name {
			t.Errorf("%s: blob %s, the Hub's ETag is %s", file.Path, file.BlobName(), name)
		}
	}
	if ref, _ := os.ReadFile(filepath.Join(x.cache, "models--org--tiny", "refs", "main")); string(ref) != commit {
		t.Errorf("refs/main = %q, want %q without a newline", ref, commit)
	}
	if _, err := os.Stat(filepath.Join(snap, "README.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("README.md is in the snapshot: not selected, it must not be fetched (%v)", err)
	}
	served := x.h.Served()
	before := tree(t, filepath.Join(x.cache, "models--org--tiny"))
	x.ensure(t, hb)
	if x.h.Served() != served {
		t.Errorf("a second ensure of a held model read %d bytes from the origin", x.h.Served()-served)
	}
	if after := tree(t, filepath.Join(x.cache, "models--org--tiny")); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("a second ensure changed the cache:\n%s\n---\n%s", before, after)
	}
}

// TestHubModelNewRevision: a new revision that changes one file fetches
// that file only, in a new snapshot directory; the old snapshot, which a
// running job may be reading, is not touched (issue 25: a repin replaced
// config.json inside the directory a running job's record named).
func TestHubModelNewRevision(t *testing.T) {
	x := newHubFixture(t)
	files := tinyRepo()
	old := x.h.Commit("org/tiny", "main", files)
	oldHub := x.model(t, "org/tiny")
	oldSnap := x.ensure(t, oldHub)
	oldTree := tree(t, oldSnap)
	oldConfig, _ := os.ReadFile(filepath.Join(oldSnap, "config.json"))

	files["config.json"] = []byte(`{"model_type":"llama","rope_theta":1e6}`)
	cur := x.h.Commit("org/tiny", "main", files)
	newHub := x.model(t, "org/tiny")
	if newHub.Commit != cur || cur == old {
		t.Fatalf("the new revision resolved to %s", newHub.Commit)
	}
	served := x.h.Served()
	newSnap := x.ensure(t, newHub)
	if newSnap == oldSnap {
		t.Fatal("the new revision was fetched into the old snapshot directory")
	}
	if got, want := x.h.Served()-served, int64(len(files["config.json"])); got != want {
		t.Errorf("the new revision read %d bytes from the origin, want %d (config.json alone)", got, want)
	}
	if got := tree(t, oldSnap); strings.Join(got, "\n") != strings.Join(oldTree, "\n") {
		t.Errorf("the old snapshot changed:\n%s\n---\n%s", oldTree, got)
	}
	if b, _ := os.ReadFile(filepath.Join(oldSnap, "config.json")); !bytes.Equal(b, oldConfig) {
		t.Errorf("the old snapshot's config.json reads %s, was %s", b, oldConfig)
	}
	if b, _ := os.ReadFile(filepath.Join(newSnap, "config.json")); !bytes.Equal(b, files["config.json"]) {
		t.Errorf("the new snapshot's config.json reads %s", b)
	}
	if ref, _ := os.ReadFile(filepath.Join(x.cache, "models--org--tiny", "refs", "main")); string(ref) != cur {
		t.Errorf("refs/main = %s, want the new commit %s", ref, cur)
	}
}

// TestHubModelBranchMoves: the branch moves while the files are fetched;
// every file still comes from the model's commit (issue 25: shard 1 from
// one commit, shard 2 and the config from another, pinned that way).
func TestHubModelBranchMoves(t *testing.T) {
	x := newHubFixture(t)
	files := tinyRepo()
	first := x.h.Commit("org/tiny", "main", files)
	hb := x.model(t, "org/tiny")
	moved := tinyRepo()
	moved["config.json"] = []byte(`{"model_type":"moved"}`)
	moved["model-00002-of-00002.safetensors"] = bytes.Repeat([]byte("X"), 200<<10)
	second := x.h.Commit("org/tiny", "other", moved)
	x.h.Move("org/tiny", "main", first)
	n := 0
	x.h.OnResolve(func(repo, rev, file string) {
		if n++; n == 2 {
			x.h.Move("org/tiny", "main", second) // a push lands mid-fetch
		}
	})
	snap := x.ensure(t, hb)
	for p, want := range files {
		if !strings.HasSuffix(p, ".md") {
			if got, _ := os.ReadFile(filepath.Join(snap, p)); !bytes.Equal(got, want) {
				t.Errorf("%s is not the bytes of commit %s", p, first)
			}
		}
	}
	for _, q := range x.h.Requests() {
		if strings.Contains(q, "/resolve/") && !strings.Contains(q, "/resolve/"+first+"/") {
			t.Errorf("a file was asked at a branch, not the commit: %s", q)
		}
	}
}

// TestHubModelRefusesWrongBytes: a mirror that serves another commit, or
// bytes that are not the Hub's digest, fails the fetch, names the file,
// and leaves no link and no ref.
func TestHubModelRefusesWrongBytes(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	bad := hb
	bad.Files = append([]catalog.HubFile(nil), hb.Files...)
	for i, f := range bad.Files {
		if f.Path == "config.json" {
			bad.Files[i].Blob = strings.Repeat("0", 40)
		}
	}
	_, err := x.f.EnsureHub(context.Background(), x.cache, bad)
	if err == nil || !strings.Contains(err.Error(), "config.json") || !strings.Contains(err.Error(), "git blob id mismatch") {
		t.Errorf("EnsureHub(wrong blob id) = %v", err)
	}
	if _, err := os.Lstat(filepath.Join(catalog.HubSnapshotDir(x.cache, "org/tiny", hb.Commit), "config.json")); err == nil {
		t.Error("a file that failed its digest was linked into the snapshot")
	}
	if _, err := os.Stat(filepath.Join(x.cache, "models--org--tiny", "refs", "main")); err == nil {
		t.Error("refs/main was written for a snapshot that is not whole")
	}

	// A commit the mirror does not serve: it answers another.
	other := hb
	other.Commit = strings.Repeat("e", 40)
	x.h.Move("org/tiny", other.Commit, hb.Commit) // the stand-in answers this "commit" with main's
	_, err = x.f.EnsureHub(context.Background(), x.cache, other)
	if err == nil || !strings.Contains(err.Error(), "the hub served commit "+hb.Commit) {
		t.Errorf("EnsureHub(another commit served) = %v", err)
	}
}

// TestHubModelOrigin: on the node's fetch path, the Hub's redirect to its
// CDN is followed without the token, 429 is waited out, and a gated
// repository is said in words naming the node's token setting.
func TestHubModelOrigin(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	x.h.Gate("org/tiny", "hf_node")
	_, err := x.f.EnsureHub(context.Background(), x.cache, hb)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "GatedRepo") || !strings.Contains(err.Error(), "hf_token_file in agent.toml") {
		t.Errorf("gated, no token: %v", err)
	}
	x.f.HFToken = "hf_node"
	x.h.Limit(2, 0) // Retry-After: 0, so the test does not sleep; the Hub client honours longer ones (weights/hub)
	if _, err := x.f.EnsureHub(context.Background(), x.cache, hb); err != nil {
		t.Fatalf("with the token, after two 429s: %v", err)
	}
}

// TestHubModelStaged: a Hugging Face cache on another filesystem than the
// llmgw cache (a filer) gets each blob whole, by a rename, after it was
// fetched and verified in the llmgw cache.
func TestHubModelStaged(t *testing.T) {
	x := newHubFixture(t)
	other, err := os.MkdirTemp("/dev/shm", "llmgw-hf-")
	if err != nil {
		t.Skipf("no /dev/shm for a second filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	os.MkdirAll(x.f.CacheDir, 0o755)
	var a, b syscall.Stat_t
	if syscall.Stat(other, &a) != nil || syscall.Stat(x.f.CacheDir, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same filesystem as the test's cache")
	}
	x.cache = other
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	snap := x.ensure(t, hb)
	for _, file := range hb.Files {
		if got, _ := os.ReadFile(filepath.Join(snap, file.Path)); !bytes.Equal(got, tinyRepo()[file.Path]) {
			t.Errorf("%s reads other bytes", file.Path)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(x.f.CacheDir, stagingDir, "models--org--tiny"))
	if len(ents) != 0 {
		t.Errorf("the staging directory still holds %v", ents)
	}
	blobs, _ := os.ReadDir(filepath.Join(other, "models--org--tiny", "blobs"))
	for _, e := range blobs {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("a temporary file is left among the blobs: %s", e.Name())
		}
	}
}

// TestHubModelNoRoom: a model whose missing files do not fit on the
// cache's disk together is refused before its first byte, though each
// file alone might fit: nothing is left half-fetched on a full disk.
func TestHubModelNoRoom(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	big := hb
	big.Files = append([]catalog.HubFile(nil), hb.Files...)
	for i := range big.Files {
		if strings.HasSuffix(big.Files[i].Path, ".safetensors") {
			big.Files[i].Size = 1 << 45 // more than any disk, less than a listing that lies
		}
	}
	_, err := x.f.EnsureHub(context.Background(), x.cache, big)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "org/tiny at "+hb.Commit+" is missing") {
		t.Errorf("EnsureHub of a model no disk holds = %v; want ErrNoSpace, naming the model", err)
	}
	if n := x.h.Served(); n != 0 {
		t.Errorf("%d bytes were fetched for a model that cannot fit", n)
	}
}

// TestHubModelBlobGoneMidFetch: a blob that goes from the cache while the
// model is being filled (the gc of an old revision in another process,
// which shared the blob, racing this fetch) is fetched again before the
// refs name the commit: the snapshot handed to engines never holds a
// link that leads nowhere.
func TestHubModelBlobGoneMidFetch(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	first := hb.Files[0]
	removed := false
	link := catalog.HubFilePath(x.cache, hb.Repo, hb.Commit, first.Path)
	x.f.OnProgress = func(Progress) {
		// Once the first file is linked, its blob goes.
		if _, err := os.Lstat(link); !removed && err == nil {
			removed = true
			if err := os.Remove(catalog.HubBlobPath(x.cache, hb.Repo, first.BlobName())); err != nil {
				t.Errorf("removing %s's blob: %v", first.Path, err)
			}
		}
	}
	snap := x.ensure(t, hb)
	if !removed {
		t.Fatal("the blob was never removed: the test did not test")
	}
	for _, f := range hb.Files {
		if st, err := os.Stat(filepath.Join(snap, f.Path)); err != nil || st.Size() != f.Size {
			t.Errorf("%s: %v; the snapshot leads nowhere for it", f.Path, err)
		}
	}
}

// TestHubModelLogsOnce: a Hub model's fetch logs a line when it starts and
// one when it ends, whatever its number of files, at the level the agent
// and the Prolog log at; each file's start and end are at debug. A
// 200-file model wrote 400 lines into slurmd's log on every node.
func TestHubModelLogsOnce(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetLevel(logrus.InfoLevel)
	log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	x.f.Log = log
	x.ensure(t, hb)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "org/tiny") || !strings.Contains(lines[1], "org/tiny") {
		t.Errorf("fetching %d files logged %d lines at info; want 2, naming the model:\n%s", len(hb.Files), len(lines), buf.String())
	}
	buf.Reset()
	x.ensure(t, hb)
	if buf.Len() != 0 {
		t.Errorf("a held model logged at info:\n%s", buf.String())
	}
}

// TestHubModelKilledMidway: a fetch cut off in the middle of a shard (the
// Prolog killed, the node rebooted) leaves nothing an engine would load:
// no link for the shard, no refs; the next fetch resumes the shard where
// it stopped, reading each byte from the Hub once.
func TestHubModelKilledMidway(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	x.h.Throttle(400 << 10)
	ctx, cancel := context.WithCancel(context.Background())
	x.f.OnProgress = func(p Progress) {
		if p.Done > 150<<10 { // well into the first shard
			cancel()
		}
	}
	if _, err := x.f.EnsureHub(ctx, x.cache, hb); err == nil {
		t.Fatal("the fetch cut off midway succeeded")
	}
	x.f.OnProgress = nil
	if _, err := os.Lstat(catalog.HubRefPath(x.cache, hb.Repo, "main")); err == nil {
		t.Error("refs/main names a commit whose snapshot is not whole")
	}
	for _, f := range hb.Files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			if _, err := os.Stat(catalog.HubFilePath(x.cache, hb.Repo, hb.Commit, f.Path)); err == nil {
				t.Errorf("%s is linked though its fetch was cut off", f.Path)
			}
		}
	}
	x.h.Throttle(0)
	x.ensure(t, hb)
	if got, size := x.h.Served(), catalog.HubSize(hb); got > size+64<<10 {
		t.Errorf("the Hub served %d bytes for a model of %d: the cut-off shard was not resumed", got, size)
	}
}
