package scan

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

// hfShards builds a snapshot of repo at rev with two safetensors shards,
// their index (with real contents), and the other files given.
func hfShards(t *testing.T, root, repo, rev string, others map[string]int64) string {
	t.Helper()
	files := map[string]int64{"model-00001-of-00002.safetensors": 4096, "model-00002-of-00002.safetensors": 2048}
	for p, n := range others {
		files[p] = n
	}
	snap := testHF(t, root, repo, rev, files)
	blob := filepath.Join(filepath.Dir(filepath.Dir(snap)), "blobs", "index-"+rev)
	testWrite(t, blob, `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`)
	testLink(t, "../../blobs/index-"+rev, filepath.Join(snap, "model.safetensors.index.json"))
	return snap
}

// TestScanHubSnapshotWithoutConfig: a Hugging Face snapshot holding every
// shard its index names but no config.json is a download that stopped
// before it, and no engine loads it (issue 25: the scanner reported it
// complete). One with its config.json beside the shards is complete; so
// are Mistral's params.json and a PEFT adapter's adapter_config.json.
func TestScanHubSnapshotWithoutConfig(t *testing.T) {
	root := t.TempDir()
	killed := hfShards(t, root, "org/killed", "aaaa", nil)
	whole := hfShards(t, root, "org/whole", "bbbb", map[string]int64{"config.json": 20, "tokenizer.json": 30})
	mistral := testHF(t, root, "org/mistral", "cccc", map[string]int64{"consolidated.safetensors": 4096, "params.json": 20})
	adapter := testHF(t, root, "org/lora", "dddd", map[string]int64{"adapter_model.safetensors": 4096, "adapter_config.json": 20})
	nested := testHF(t, root, "org/diffusion", "eeee", map[string]int64{"model_index.json": 5,
		"unet/diffusion_pytorch_model.safetensors": 4096, "unet/config.json": 5, "vae/diffusion_pytorch_model.safetensors": 4096})
	got := scanOne(t, root)
	if l := got[killed]; l.Complete || !strings.Contains(l.Problem, "config.json (missing beside the safetensors") {
		t.Errorf("a snapshot without config.json: %+v; want incomplete, naming config.json", l)
	}
	for _, p := range []string{whole, mistral, adapter} {
		if l := got[p]; !l.Complete {
			t.Errorf("%s: %+v; want complete", p, l)
		}
	}
	if l := got[nested]; l.Complete || !strings.Contains(l.Problem, "vae/config.json (missing") || strings.Contains(l.Problem, "unet/config.json") {
		t.Errorf("a diffusion snapshot missing vae/config.json: %+v", l)
	}
}

// TestScanHubList: a snapshot of a catalog Hub model's commit is judged by
// the model's list and nothing else: complete with every listed file of
// its size, whoever downloaded it and whatever else is there or still
// downloading; incomplete, naming the file, when one is missing, of
// another size, or cut short.
func TestScanHubList(t *testing.T) {
	root := t.TempDir()
	list := func(repo, commit string, files map[string]int64) catalog.Hub {
		h := catalog.Hub{Repo: repo, Revision: "main", Commit: commit}
		for p, n := range files {
			h.Files = append(h.Files, catalog.HubFile{Path: p, Size: n})
		}
		return h
	}
	files := map[string]int64{"model-00001-of-00002.safetensors": 4096, "model-00002-of-00002.safetensors": 2048, "config.json": 20, "tokenizer.json": 30}
	// Held: every listed file; a README the list does not name is missing,
	// and another revision's blob is still being written.
	held := hfShards(t, root, "org/held", "1111", map[string]int64{"config.json": 20, "tokenizer.json": 30})
	testFile(t, filepath.Join(root, "models--org--held", "blobs", "other.incomplete"), 10)
	// The heuristics would call this one complete (shards, index, config),
	// but the tokenizer the model lists is not there.
	noTok := hfShards(t, root, "org/notok", "2222", map[string]int64{"config.json": 20})
	// A file of another size than the Hub lists.
	short := hfShards(t, root, "org/short", "3333", map[string]int64{"config.json": 19, "tokenizer.json": 30})
	// No config.json at all, but the model's list does not name one (a
	// GGUF-only selection): complete by the list.
	gguf := testHF(t, root, "org/gguf", "4444", map[string]int64{"m-Q4.gguf": 4096})
	// A listed shard cut short: the header says so.
	cut := hfShards(t, root, "org/cut", "5555", map[string]int64{"config.json": 20, "tokenizer.json": 30})
	testFileAs(t, filepath.Join(root, "models--org--cut", "blobs", "cut"), 5, "x.safetensors")
	testLink(t, "../../blobs/cut", filepath.Join(cut, "extra.safetensors"))

	opt := Options{Hub: map[string]catalog.Hub{}}
	for _, h := range []catalog.Hub{
		list("org/held", "1111", files), list("ORG/NoTok", "2222", files), list("org/short", "3333", files),
		list("org/gguf", "4444", map[string]int64{"m-Q4.gguf": 4096}),
		list("org/cut", "5555", map[string]int64{"extra.safetensors": 5, "config.json": 20}),
	} {
		opt.Hub[HubKey(h.Repo, h.Commit)] = h
	}
	got := map[string]Local{}
	for _, l := range Scan(context.Background(), []string{root}, opt).Weights {
		got[l.Path] = l
	}
	for p, want := range map[string]string{
		held:  "",
		noTok: "tokenizer.json (missing, one of the files of ORG/NoTok",
		short: "config.json (19 bytes, the Hub lists 20)",
		gguf:  "",
		cut:   "extra.safetensors (5 bytes, too short",
	} {
		l, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s not reported", p)
		case want == "" && !l.Complete:
			t.Errorf("%s: %+v; want complete by the catalog's list", p, l)
		case want != "" && (l.Complete || !strings.Contains(l.Problem, want)):
			t.Errorf("%s: %+v; want incomplete, saying %q", p, l, want)
		}
	}
	// The same snapshot scanned without the list is held to the rules.
	if l := scanOne(t, root)[held]; l.Complete {
		t.Errorf("%s without the catalog's list: %+v; another revision's blob is still being written", held, l)
	}
}

// TestScanHubStaging: the llmgw cache's staging directory for a Hugging
// Face cache on a filer is not a model.
func TestScanHubStaging(t *testing.T) {
	root := t.TempDir()
	testFile(t, filepath.Join(root, catalog.HubStagingDir, "models--o--r", "abc"), 10)
	res := Scan(context.Background(), []string{root}, Options{})
	if len(res.Weights) != 0 {
		t.Errorf("staging reported as weights: %+v", res.Weights)
	}
}
