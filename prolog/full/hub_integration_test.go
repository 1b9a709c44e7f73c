//go:build integration

package full_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// The engine loads what llmgw fetched, for real (issue 25, item 6). On the
// sid root of the release matrix, which holds Debian's huggingface_hub
// 1.x, transformers 5, tokenizers and CPU torch (scripts/release-root):
// transformers makes a tiny random causal LM saved in several safetensors
// shards with its tokenizer; the Hub stand-in serves it as org/tiny;
// `llmgw models add` registers it; a job's Prolog fetches it through the
// node's agent; and in the job, with nothing but the TaskProlog's
// environment (HF_HUB_CACHE, HF_HUB_OFFLINE=1), transformers loads the
// model and the tokenizer by the id org/tiny and generates a token, and
// huggingface_hub's snapshot_download(local_files_only=True) returns the
// snapshot, asking the Hub nothing. Then huggingface_hub downloads the
// same files from the stand-in itself, and its cache holds the same tree
// (names, links, blobs, refs) as llmgw's.

// hfStack is what the test needs of the release's Python.
const hfStack = "import huggingface_hub, transformers, tokenizers, torch; print(huggingface_hub.__version__, transformers.__version__, torch.__version__)"

// makeTiny is run by python3: a tiny Llama with random weights, saved in
// shards of at most 40 kB, with a word-level tokenizer made on the spot
// (no download) and a chat template.
const makeTiny = `
import sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = sys.argv[1]
words = ["<unk>", "<s>", "</s>", "<pad>"] + ["hello", "world", "llmgw", "fetches", "weights", "once", "per", "fabric"]
tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
fast.save_pretrained(out)
torch.manual_seed(25)
config = LlamaConfig(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     bos_token_id=1, eos_token_id=2, pad_token_id=3)
LlamaForCausalLM(config).save_pretrained(out, max_shard_size="40KB")
`

// loadTiny is the job: the engine's calls by repository id, offline.
const loadTiny = `
import os, json
from transformers import AutoModelForCausalLM, AutoTokenizer
from huggingface_hub import snapshot_download
tok = AutoTokenizer.from_pretrained("org/tiny")
model = AutoModelForCausalLM.from_pretrained("org/tiny")
ids = tok("hello world", return_tensors="pt")
out = model.generate(**ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
print("RESULT " + json.dumps({
    "generated": int(out.shape[1] - ids["input_ids"].shape[1]),
    "snapshot": snapshot_download("org/tiny", local_files_only=True),
    "cache": os.environ.get("HF_HUB_CACHE"), "offline": os.environ.get("HF_HUB_OFFLINE"),
    "path": os.environ.get("LLMGW_MODEL_PATH")}))
`

// downloadTiny is huggingface_hub downloading the same selection itself.
const downloadTiny = `
import sys, json
from huggingface_hub import snapshot_download
print(snapshot_download("org/tiny", cache_dir=sys.argv[1], allow_patterns=json.loads(sys.argv[2])))
`

func python(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", args[0][:min(len(args[0]), 40)], err, out)
	}
	return string(out)
}

// hfTree lists a repository folder of a Hugging Face cache as the
// comparison needs it: each blob by name with its content's digest, each
// snapshot entry with its link, each ref with its commit. huggingface_hub's
// own listing cache (trees/, which llmgw does not write: see
// weights/fetch/hub.go) is not part of the layout engines read.
func hfTree(t *testing.T, repo string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		switch {
		case rel == "trees" && d.IsDir():
			return filepath.SkipDir
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+" -> "+l)
		case d.Type().IsRegular() && strings.HasPrefix(rel, "blobs/"):
			b, _ := os.ReadFile(p)
			s := sha256.Sum256(b)
			out = append(out, rel+" sha256:"+hex.EncodeToString(s[:]))
		case d.Type().IsRegular():
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

func TestHubEngineLoads(t *testing.T) {
	c := newCluster(t)
	versions, err := exec.Command("/usr/bin/python3", "-c", hfStack).CombinedOutput()
	if err != nil {
		rel, _ := os.ReadFile("/etc/os-release")
		if strings.Contains(string(rel), "sid") {
			t.Fatalf("the sid root lacks the engine's Python stack (scripts/release-root puts python3-huggingface-hub, -transformers, -tokenizers and -torch there): %v\n%s", err, versions)
		}
		t.Skip("the engine-load test runs on the sid root of the release matrix, the one with huggingface_hub 1.x, transformers 5 and torch (scripts/release-root); this release has not: " + strings.TrimSpace(string(versions)))
	}
	t.Logf("huggingface_hub, transformers, torch: %s", strings.TrimSpace(string(versions)))

	// The model, made by transformers, served as org/tiny with a README
	// no engine loads.
	made := t.TempDir()
	python(t, nil, "-c", makeTiny, made)
	os.WriteFile(filepath.Join(made, "README.md"), []byte("# tiny\n"), 0o644)
	shards, _ := filepath.Glob(filepath.Join(made, "model-*-of-*.safetensors"))
	if len(shards) < 3 {
		t.Fatalf("transformers saved %d shards; the test wants several", len(shards))
	}
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	commit, err := h.CommitDir("org/tiny", "main", made)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_ENDPOINT", h.URL) // for the agent's fetches, started below

	coord, token, _ := c.coordinator()
	out := c.llmgw("models", "add", "tiny", "hf:org/tiny", "--coordinator", coord, "--token-file", token)
	if !strings.Contains(out, commit) || !strings.Contains(out, "not selected: 1 file (README.md)") {
		t.Fatalf("models add:\n%s", out)
	}
	var list struct {
		Models []catalog.Model `json:"models"`
	}
	if err := json.Unmarshal([]byte(c.llmgw("models", "list", "--json", "--coordinator", coord)), &list); err != nil || len(list.Models) != 1 || list.Models[0].Hub == nil {
		t.Fatalf("models list: %+v, %v", list, err)
	}
	hb := *list.Models[0].Hub
	var selected []string
	var size int64
	for _, f := range hb.Files {
		selected = append(selected, f.Path)
		size += f.Size
	}

	dir := c.node("n1", coord)
	c.agent("n1", dir, coord, token)
	script := filepath.Join(t.TempDir(), "load.py")
	os.WriteFile(script, []byte(loadTiny), 0o644)
	before := len(h.Requests())
	served := h.Served()
	j := c.sbatch("n1", "tiny", "/usr/bin/python3 "+script)
	if j.rc != nil {
		t.Fatalf("job %s: %v; output:\n%s", j.id, j.rc, j.output)
	}
	if got := h.Served() - served; got != size {
		t.Errorf("the Prolog read %d bytes from the Hub, want %d (the selection, once)", got, size)
	}
	// The job itself asked the Hub nothing: offline, it found the model.
	var fetchReqs int
	for _, r := range h.Requests()[before:] {
		if strings.Contains(r, "/resolve/") {
			fetchReqs++
		}
		if strings.Contains(r, "/api/") {
			t.Errorf("the Hub's API was asked during the job: %s", r)
		}
	}
	if fetchReqs != len(hb.Files) {
		t.Errorf("%d files asked of the Hub during the job, want %d (the Prolog's, one each)", fetchReqs, len(hb.Files))
	}
	var res struct {
		Generated int    `json:"generated"`
		Snapshot  string `json:"snapshot"`
		Cache     string `json:"cache"`
		Offline   string `json:"offline"`
		Path      string `json:"path"`
	}
	i := strings.Index(j.output, "RESULT ")
	if i < 0 || json.Unmarshal([]byte(strings.SplitN(j.output[i+len("RESULT "):], "\n", 2)[0]), &res) != nil {
		t.Fatalf("job %s printed no result:\n%s", j.id, j.output)
	}
	hf := filepath.Join(dir, "cache", catalog.DefaultHFDir)
	snap := catalog.HubSnapshotDir(hf, "org/tiny", commit)
	if res.Generated != 1 || res.Snapshot != snap || res.Path != snap || res.Cache != hf || res.Offline != "1" {
		t.Errorf("the job: %+v; want 1 token generated, offline, from %s", res, snap)
	}

	// huggingface_hub downloads the selection itself; the trees are one.
	own := t.TempDir()
	sel, _ := json.Marshal(selected)
	python(t, []string{"HF_ENDPOINT=" + h.URL, "HF_HUB_OFFLINE=0", "HF_HUB_DISABLE_TELEMETRY=1"}, "-c", downloadTiny, own, string(sel))
	theirs := hfTree(t, filepath.Join(own, "models--org--tiny"))
	ours := hfTree(t, filepath.Join(hf, "models--org--tiny"))
	if strings.Join(theirs, "\n") != strings.Join(ours, "\n") {
		t.Errorf("huggingface_hub's tree and llmgw's differ:\nhuggingface_hub:\n  %s\nllmgw:\n  %s", strings.Join(theirs, "\n  "), strings.Join(ours, "\n  "))
	}
	t.Logf("%d files, %s; huggingface_hub's layout:\n  %s", len(selected), catalog.FormatBytes(size), strings.Join(theirs, "\n  "))
}
