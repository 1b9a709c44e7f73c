package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// The defects of issue 25 on the real parts: `llmgw models add` against a
// coordinator on a sqlite file and a Hub stand-in on 127.0.0.1, `llmgw
// prolog` fetching as a node does, `llmgw task-prolog` telling the job.
// These tests speak only through commands, files and the stand-in, so
// that they run unchanged against the code before the fix and fail there.

// hubShards is a sharded checkpoint as transformers saves one, with the
// files a repository also holds that no engine loads.
func hubShards(config string) map[string][]byte {
	return map[string][]byte{
		"config.json":                      []byte(config),
		"model-00001-of-00002.safetensors": safetensorsFile(64 << 10),
		"model-00002-of-00002.safetensors": safetensorsFile(32 << 10),
		"model.safetensors.index.json":     []byte(`{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`),
		"tokenizer.json":                   []byte(`{"version":"1.0"}`),
		"README.md":                        []byte("# tiny\n"),
		"original/consolidated.00.pth":     []byte("meta's own format"),
	}
}

// safetensorsFile is a well-formed safetensors file of n bytes: an empty
// header padded with spaces, then zeros.
func safetensorsFile(n int) []byte {
	b := make([]byte, n)
	const hl = 256
	binary.LittleEndian.PutUint64(b, hl)
	copy(b[8:], "{}")
	for i := 8 + 2; i < 8+hl; i++ {
		b[i] = ' '
	}
	return b
}

func startStandIn(t *testing.T) *hubtest.Hub {
	t.Helper()
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	// The fetcher in the Prolog reads HF_ENDPOINT from the process, as
	// huggingface_hub does; the command line takes it from its env.
	t.Setenv("HF_ENDPOINT", h.URL)
	return h
}

// tinyListed are the files of org/tiny named one by one.
func tinyListed() []string {
	return []string{"hf:org/tiny/model-00001-of-00002.safetensors", "hf:org/tiny/model-00002-of-00002.safetensors", "hf:org/tiny/config.json"}
}

func jobPath(t *testing.T, n setNode, job string) string {
	t.Helper()
	llmgwRun(t, n.job(job), "prolog", "--config", n.conf)
	rec, err := catalog.ReadJobRecord(n.run, job)
	if err != nil || rec.Error != "" || rec.Path == "" {
		t.Fatalf("job %s on %s: %+v, %v", job, n.name, rec, err)
	}
	return rec.Path
}

// TestHubRepositoryIsAModel: a repository is registered as itself, by
// `models add NAME hf:ORG/REPO` (issue 25: it was refused, and a model had
// to be every file typed by hand), as the files an engine loads at the
// commit main stands for; add prints them.
func TestHubRepositoryIsAModel(t *testing.T) {
	coord, _, adminTok := testCoordinator(t)
	h := startStandIn(t)
	commit := h.Commit("org/tiny", "main", hubShards(`{"model_type":"llama"}`))
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	code, out, errs := llmgwRun(t, admin, "models", "add", "qwen", "hf:org/tiny")
	if code != 0 {
		t.Fatalf("models add qwen hf:org/tiny: exit %d, %q %q", code, out, errs)
	}
	for _, want := range []string{commit, "model-00001-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "not selected: 2 files (README.md, original/consolidated.00.pth)"} {
		if !strings.Contains(out, want) {
			t.Errorf("models add says:\n%s\nwant it to say %q", out, want)
		}
	}
	_, out, _ = llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": coord}, "models", "list", "--json")
	var list struct {
		Models []struct {
			Name string `json:"name"`
			Hub  struct {
				Repo   string `json:"repo"`
				Commit string `json:"commit"`
				Files  []struct {
					Path string `json:"path"`
				} `json:"files"`
			} `json:"hub"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Models) != 1 || list.Models[0].Hub.Commit != commit || len(list.Models[0].Hub.Files) != 5 {
		t.Errorf("models list --json:\n%s", out)
	}
	if _, out, _ := llmgwRun(t, map[string]string{"LLMGW_COORDINATOR": coord}, "models", "list"); !strings.Contains(out, "hf:org/tiny@"+commit[:12]+" (main, 5 files)") || !strings.Contains(out, "commit") {
		t.Errorf("models list:\n%s", out)
	}
	// --include adds, --exclude takes away.
	if code, out, errs := llmgwRun(t, admin, "models", "add", "qwen", "hf:org/tiny@"+commit, "--include", "original/*", "--exclude", "tokenizer.json"); code != 0 ||
		!strings.Contains(out, "original/consolidated.00.pth") || strings.Contains(out, "  tokenizer.json") {
		t.Errorf("models add with --include and --exclude: exit %d:\n%s%s", code, out, errs)
	}
	// A second model of the repository is refused: an engine given its id
	// finds one revision.
	if code, _, errs := llmgwRun(t, admin, "models", "add", "other", "hf:org/tiny"); code == 0 || !strings.Contains(errs, "repository org/tiny is already model qwen") {
		t.Errorf("a second model of org/tiny: exit %d, %q", code, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "x", "hf:org/none"); code == 0 || !strings.Contains(errs, "nothing was registered") {
		t.Errorf("a repository the Hub does not have: exit %d, %q", code, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "add", "x", "/models/a.gguf", "--include", "*.gguf"); code != 2 || !strings.Contains(errs, "select files of a repository") {
		t.Errorf("--include with a path: exit %d, %q", code, errs)
	}
}

// TestHubSetOneCommit: the branch moves while a node fetches the files of
// a model named one by one; every file still comes from one commit, and
// another node later gets the same bytes (issue 25: shard 1 of one commit,
// shard 2 and the config of another, pinned that way cluster-wide).
func TestHubSetOneCommit(t *testing.T) {
	coord, agentTok, adminTok := testCoordinator(t)
	h := startStandIn(t)
	first := hubShards(`{"model_type":"first"}`)
	a := h.Commit("org/tiny", "main", first)
	moved := hubShards(`{"model_type":"moved"}`)
	moved["model-00002-of-00002.safetensors"] = safetensorsFile(48 << 10)
	b := h.Commit("org/tiny", "next", moved)
	h.Move("org/tiny", "main", a)
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	if code, out, errs := llmgwRun(t, admin, append([]string{"models", "add", "qwen"}, tinyListed()...)...); code != 0 {
		t.Fatalf("models add: exit %d, %q %q", code, out, errs)
	}
	// A push lands as the node asks for its first file.
	pushed := false
	h.OnResolve(func(repo, rev, file string) {
		if !pushed {
			pushed = true
			h.Move("org/tiny", "main", b)
		}
	})
	n1 := newSetNode(t, "gpu01", coord, agentTok("gpu01"))
	p1 := jobPath(t, n1, "1")
	for name, want := range first {
		if !strings.HasSuffix(name, ".safetensors") && name != "config.json" {
			continue
		}
		if got, err := os.ReadFile(filepath.Join(p1, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("job 1's %s: %d bytes, %v; want the bytes of commit %s, whose file the model's first is", name, len(got), err, a)
		}
	}
	// Another node, with main at the new commit all along.
	n2 := newSetNode(t, "gpu02", coord, agentTok("gpu02"))
	p2 := jobPath(t, n2, "2")
	for _, name := range []string{"config.json", "model-00002-of-00002.safetensors"} {
		x, _ := os.ReadFile(filepath.Join(p1, name))
		y, err := os.ReadFile(filepath.Join(p2, name))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between the nodes of the cluster: %d and %d bytes, %v", name, len(x), len(y), err)
		}
	}
}

// TestHubEngineFindsByID: the files land where an engine looks for the
// repository id (issue 25: in a set directory of llmgw's naming, which no
// engine finds): huggingface_hub's layout in the node's Hugging Face
// cache, refs/main naming the commit, and the job's environment naming
// that cache, offline.
func TestHubEngineFindsByID(t *testing.T) {
	coord, agentTok, adminTok := testCoordinator(t)
	h := startStandIn(t)
	commit := h.Commit("org/tiny", "main", hubShards(`{"model_type":"llama"}`))
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	if code, out, errs := llmgwRun(t, admin, append([]string{"models", "add", "qwen"}, tinyListed()...)...); code != 0 {
		t.Fatalf("models add: exit %d, %q %q", code, out, errs)
	}
	n := newSetNode(t, "gpu01", coord, agentTok("gpu01"))
	jobPath(t, n, "1")
	_, out, _ := llmgwRun(t, n.job("1"), "task-prolog", "--config", n.conf)
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	cache := env["HF_HUB_CACHE"]
	if cache == "" || env["HF_HUB_OFFLINE"] != "1" {
		t.Fatalf("task-prolog exports %v; want HF_HUB_CACHE and HF_HUB_OFFLINE=1", env)
	}
	// What huggingface_hub does offline for from_pretrained("org/tiny").
	repo := filepath.Join(cache, "models--org--tiny")
	ref, err := os.ReadFile(filepath.Join(repo, "refs", "main"))
	if err != nil || string(ref) != commit {
		t.Fatalf("refs/main: %q, %v; want %s", ref, err, commit)
	}
	snap := filepath.Join(repo, "snapshots", string(ref))
	if env["LLMGW_MODEL_PATH"] != snap {
		t.Errorf("LLMGW_MODEL_PATH = %s, want the snapshot %s", env["LLMGW_MODEL_PATH"], snap)
	}
	for _, name := range []string{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		p := filepath.Join(snap, name)
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, "../../blobs/") {
			t.Errorf("%s: a link %q, %v; want a relative link into blobs/", p, target, err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, hubShards(`{"model_type":"llama"}`)[name]) {
			t.Errorf("%s reads %d bytes, %v", p, len(got), err)
		}
	}
}

// TestHubRepinKeepsRunningJob: a repin while a job runs does not change
// what the job was given (issue 25: a later job's fetch replaced
// config.json in the directory the running job's record named, and a
// second srun of that job read the new config beside the old weights).
func TestHubRepinKeepsRunningJob(t *testing.T) {
	coord, agentTok, adminTok := testCoordinator(t)
	h := startStandIn(t)
	files := hubShards(`{"model_type":"before"}`)
	h.Commit("org/tiny", "main", files)
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	if code, out, errs := llmgwRun(t, admin, append([]string{"models", "add", "qwen"}, tinyListed()...)...); code != 0 {
		t.Fatalf("models add: exit %d, %q %q", code, out, errs)
	}
	n1 := newSetNode(t, "gpu01", coord, agentTok("gpu01"))
	p1 := jobPath(t, n1, "1") // job 1 runs on gpu01 from here on

	files["config.json"] = []byte(`{"model_type":"after"}`)
	h.Commit("org/tiny", "main", files)
	if code, out, errs := llmgwRun(t, admin, "models", "repin", "qwen"); code != 0 {
		t.Fatalf("models repin: exit %d, %q %q", code, out, errs)
	}
	// Another node fetches the model as it is now, then a later job on
	// gpu01 does.
	n2 := newSetNode(t, "gpu02", coord, agentTok("gpu02"))
	jobPath(t, n2, "2")
	p3 := jobPath(t, n1, "3")

	if got, _ := os.ReadFile(filepath.Join(p1, "config.json")); string(got) != `{"model_type":"before"}` {
		t.Errorf("job 1's config.json at %s now reads %s; a running job's revision must not change under it", p1, got)
	}
	if rec, _ := catalog.ReadJobRecord(n1.run, "1"); rec.Path != p1 {
		t.Errorf("job 1's record names %s, was %s", rec.Path, p1)
	}
	if got, _ := os.ReadFile(filepath.Join(p3, "config.json")); string(got) != `{"model_type":"after"}` {
		t.Errorf("job 3, after the repin, reads config.json %s", got)
	}
}

// TestHubAddSaysWhileRateLimited: models add waits out the Hub's 429 as
// its Retry-After asks, up to two minutes a time and six times, and says so
// on stderr while it waits: it sat silent for as long as ten minutes.
func TestHubAddSaysWhileRateLimited(t *testing.T) {
	coord, _, adminTok := testCoordinator(t)
	h := startStandIn(t)
	h.Commit("org/tiny", "main", hubShards(`{"model_type":"llama"}`))
	h.Limit(1, 1)
	admin := map[string]string{"LLMGW_COORDINATOR": coord, "LLMGW_TOKEN_FILE": adminTok, "HF_ENDPOINT": h.URL}
	code, _, errs := llmgwRun(t, admin, "models", "add", "tiny", "hf:org/tiny")
	if code != 0 {
		t.Fatalf("models add after one 429: exit %d, %s", code, errs)
	}
	if !strings.Contains(errs, "429") || !strings.Contains(errs, "waiting 1s") {
		t.Errorf("models add said nothing while it waited out a 429:\n%s", errs)
	}
}
