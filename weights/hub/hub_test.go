package hub

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

func startHub(t *testing.T) *hubtest.Hub {
	t.Helper()
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// llamaLike is a repository as Meta's and most others are laid out: two
// safetensors shards and their index, the same weights as .bin and in
// original/, a GGUF, the configs, the tokenizer, a chat template, a README.
func llamaLike() map[string][]byte {
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 20},
		"weight_map": map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})
	return map[string][]byte{
		".gitattributes":                       []byte("*.safetensors filter=lfs\n"),
		"README.md":                            []byte("# a model\n"),
		"LICENSE":                              []byte("license\n"),
		"config.json":                          []byte(`{"model_type":"llama"}`),
		"generation_config.json":               []byte(`{}`),
		"model-00001-of-00002.safetensors":     []byte("shard one bytes"),
		"model-00002-of-00002.safetensors":     []byte("shard two"),
		"model.safetensors.index.json":         index,
		"consolidated.safetensors":             []byte("the same weights, once more"),
		"pytorch_model.bin":                    []byte("pickled weights"),
		"original/consolidated.00.pth":         []byte("meta's own"),
		"original/params.json":                 []byte(`{}`),
		"model-q4.gguf":                        []byte("quantised"),
		"tokenizer.json":                       []byte(`{}`),
		"tokenizer_config.json":                []byte(`{}`),
		"special_tokens_map.json":              []byte(`{}`),
		"chat_template.jinja":                  []byte("{{ messages }}"),
		"additional_chat_templates/tool.jinja": []byte("{{ tools }}"),
		"modeling_custom.py":                   []byte("# remote code\n"),
		"images/logo.png":                      []byte("png"),
	}
}

func paths(files []File) string {
	var p []string
	for _, f := range files {
		p = append(p, f.Path)
	}
	return strings.Join(p, " ")
}

// TestResolve: a revision resolves to the commit the branch names, and
// the listing (paged) is of that commit, with the sizes and the digests
// the Hub publishes: an LFS file's sha256, another's git blob id, as git
// computes it.
func TestResolve(t *testing.T) {
	h := startHub(t)
	h.PageSize = 3
	files := llamaLike()
	commit := h.Commit("org/llama", "main", files)
	c := &Client{Endpoint: h.URL}
	r, err := c.Resolve(context.Background(), "org/llama", "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Commit != commit || r.Revision != "main" || r.Repo != "org/llama" || len(r.Files) != len(files) {
		t.Fatalf("Resolve = %s@%s (%s), %d files; want %s, %d files", r.Repo, r.Commit, r.Revision, len(r.Files), commit, len(files))
	}
	for _, f := range r.Files {
		data := files[f.Path]
		if f.Size != int64(len(data)) {
			t.Errorf("%s: size %d, want %d", f.Path, f.Size, len(data))
		}
		if hubtest.IsLFS(f.Path, len(data)) {
			if err := catalog.CheckHubDigest(f.Hub(), data); err != nil || f.LFS == "" {
				t.Errorf("%s: LFS sha256 %q: %v", f.Path, f.LFS, err)
			}
			continue
		}
		if f.LFS != "" {
			t.Errorf("%s is in git, listed as LFS", f.Path)
		}
		if err := catalog.CheckHubDigest(f.Hub(), data); err != nil {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
	// Asked for the commit itself, the same.
	if r2, err := c.Resolve(context.Background(), "ORG/llama", commit); err != nil || r2.Commit != commit || r2.Repo != "org/llama" {
		t.Errorf("Resolve(commit, other case) = %s@%s, %v; want the Hub's spelling org/llama", r2.Repo, r2.Commit, err)
	}
	var pages int
	for _, q := range h.Requests() {
		if strings.Contains(q, "/tree/") {
			pages++
			if !strings.Contains(q, "/tree/"+commit) {
				t.Errorf("the tree was asked at %s, not at the commit", q)
			}
		}
	}
	if want := 2 * ((len(files) + 3 /* directories */ + 2) / 3); pages < want-2 {
		t.Errorf("%d tree pages asked for %d files at 3 a page", pages, len(files))
	}
}

// TestSelectDefault: the default takes what an engine loads (the shards
// the index names, the index, configs, tokenizer, chat templates, remote
// code) and nothing else: not the .bin beside the safetensors, not
// original/, not the GGUF, not consolidated.safetensors.
func TestSelectDefault(t *testing.T) {
	h := startHub(t)
	h.Commit("org/llama", "main", llamaLike())
	c := &Client{Endpoint: h.URL}
	hb, sel, err := c.Model(context.Background(), "org/llama", "main", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "additional_chat_templates/tool.jinja chat_template.jinja config.json generation_config.json model-00001-of-00002.safetensors " +
		"model-00002-of-00002.safetensors model.safetensors.index.json modeling_custom.py special_tokens_map.json tokenizer.json tokenizer_config.json"
	if got := paths(sel.Files); got != want {
		t.Errorf("default selection:\n got %s\nwant %s", got, want)
	}
	if sel.Index != "model.safetensors.index.json" || len(hb.Files) != len(sel.Files) || hb.Commit == "" || hb.Revision != "main" {
		t.Errorf("hub %+v, index %q", hb, sel.Index)
	}
	for _, f := range hb.Files {
		if (f.SHA256 == "") == (f.Blob == "") {
			t.Errorf("%s: sha256 %q blob %q", f.Path, f.SHA256, f.Blob)
		}
	}
	// --include adds (the GGUF, original/), --exclude takes away, after.
	_, sel, err = c.Model(context.Background(), "org/llama", "main", []string{"*.gguf", "original/"}, []string{"*.py", "additional_chat_templates/*", "original/params.json"})
	if err != nil {
		t.Fatal(err)
	}
	got := paths(sel.Files)
	for _, p := range []string{"model-q4.gguf", "original/consolidated.00.pth"} {
		if !strings.Contains(got, p) {
			t.Errorf("--include did not add %s: %s", p, got)
		}
	}
	for _, p := range []string{"modeling_custom.py", "tool.jinja", "params.json", "README.md", "pytorch_model.bin"} {
		if strings.Contains(got, p) {
			t.Errorf("%s selected: %s", p, got)
		}
	}
}

func TestSelectWeightsFallback(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  string
	}{
		"single safetensors": {map[string]string{"model.safetensors": "w", "pytorch_model.bin": "p", "config.json": "{}"}, "config.json model.safetensors"},
		"other safetensors":  {map[string]string{"adapter_model.safetensors": "w", "adapter_config.json": "{}", "sub/x.safetensors": "s"}, "adapter_model.safetensors"},
		"bin only":           {map[string]string{"pytorch_model.bin": "p", "config.json": "{}", "vocab.txt": "v"}, "config.json pytorch_model.bin vocab.txt"},
		"pt files":           {map[string]string{"model.pt": "p", "tokenizer.model": "t", "x.tiktoken": "k"}, "model.pt tokenizer.model x.tiktoken"},
	} {
		t.Run(name, func(t *testing.T) {
			h := startHub(t)
			files := map[string][]byte{}
			for p, s := range tc.files {
				files[p] = []byte(s)
			}
			h.Commit("o/r", "main", files)
			_, sel, err := (&Client{Endpoint: h.URL}).Model(context.Background(), "o/r", "", nil, nil)
			if err != nil || paths(sel.Files) != tc.want {
				t.Errorf("selection = %q, %v; want %q", paths(sel.Files), err, tc.want)
			}
		})
	}
}

// TestSelectRefuses: a selection no engine could load is refused when the
// model is added, saying what to do.
func TestSelectRefuses(t *testing.T) {
	badIndex, _ := json.Marshal(map[string]any{"weight_map": map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
	for name, tc := range map[string]struct {
		files   map[string][]byte
		include []string
		want    string
	}{
		"index names a missing shard": {map[string][]byte{"model.safetensors.index.json": badIndex, "model-00001-of-00002.safetensors": []byte("x")}, nil,
			"names shard model-00002-of-00002.safetensors, which the repository does not hold"},
		"index not json":   {map[string][]byte{"model.safetensors.index.json": []byte("{"), "model-00001-of-00002.safetensors": []byte("x")}, nil, "is not an index"},
		"gguf only":        {map[string][]byte{"m-Q4_K_M.gguf": []byte("q"), "README.md": []byte("r")}, nil, "GGUF only when asked; it holds m-Q4_K_M.gguf: choose with --include GLOB, e.g. --include '*.gguf'"},
		"weights in dirs":  {map[string][]byte{"model_index.json": []byte("{}"), "unet/diffusion_pytorch_model.safetensors": []byte("u")}, nil, "--include 'unet/*.safetensors'"},
		"include no match": {map[string][]byte{"m.gguf": []byte("q")}, []string{"*.safetensors"}, "--include matched none of its weight files"},
		"no weights":       {map[string][]byte{"README.md": []byte("r")}, nil, "the repository holds none"},
		"empty glob":       {map[string][]byte{"model.safetensors": []byte("r")}, []string{""}, "empty --include"},
	} {
		t.Run(name, func(t *testing.T) {
			h := startHub(t)
			h.Commit("o/r", "main", tc.files)
			_, _, err := (&Client{Endpoint: h.URL}).Model(context.Background(), "o/r", "", tc.include, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Model = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestListedOneCommit: files named one by one are one model at one
// commit, the first file's; a file whose revision stands for another
// commit, or in another repository, fails them all (issue 25: a set
// assembled from two commits).
func TestListedOneCommit(t *testing.T) {
	h := startHub(t)
	old := h.Commit("org/m", "main", map[string][]byte{"model.safetensors": []byte("old"), "config.json": []byte("{}")})
	h.Move("org/m", "v1", old)
	cur := h.Commit("org/m", "main", map[string][]byte{"model.safetensors": []byte("new"), "config.json": []byte(`{"a":1}`)})
	c := &Client{Endpoint: h.URL}
	ctx := context.Background()

	hb, _, err := c.Listed(ctx, []string{"hf:org/m/model.safetensors", "hf:org/m/config.json"})
	if err != nil || hb.Commit != cur || !hb.Listed || len(hb.Files) != 2 || hb.Revision != "main" {
		t.Fatalf("Listed(main) = %+v, %v", hb, err)
	}
	hb, _, err = c.Listed(ctx, []string{"hf:org/m@v1/model.safetensors", "hf:org/m@" + old + "/config.json"})
	if err != nil || hb.Commit != old {
		t.Errorf("Listed(v1 and its commit) = %s, %v; want %s", hb.Commit, err, old)
	}
	for name, tc := range map[string]struct {
		sources []string
		want    string
	}{
		"two commits": {[]string{"hf:org/m@v1/model.safetensors", "hf:org/m/config.json"}, "these disagree; nothing was registered"},
		"two repos":   {[]string{"hf:org/m/model.safetensors", "hf:org/other/config.json"}, "from one repository at one commit"},
		"missing":     {[]string{"hf:org/m/model.safetensors", "hf:org/m/nope.json"}, "holds no file nope.json"},
		"repository":  {[]string{"hf:org/m", "hf:org/m/config.json"}, "names a repository"},
		"no weights":  {[]string{"hf:org/m/config.json"}, "none of the files named is a weight file"},
	} {
		if _, _, err := c.Listed(ctx, tc.sources); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Listed = %v, want %q", name, err, tc.want)
		}
	}

	// A repin of a listed model keeps its paths, at the branch's commit now.
	h2, _, _ := c.Listed(ctx, []string{"hf:org/m/model.safetensors"})
	next := h.Commit("org/m", "main", map[string][]byte{"model.safetensors": []byte("newer"), "config.json": []byte("{}"), "extra.safetensors": []byte("e")})
	r, _, err := c.Repin(ctx, h2)
	if err != nil || r.Commit != next || len(r.Files) != 1 || r.Files[0].Path != "model.safetensors" {
		t.Errorf("Repin(listed) = %+v, %v", r, err)
	}
}

// TestGated: a gated repository without a token, or with one it refuses,
// is said in words naming the token setting; with its token it resolves,
// and the token never goes to the CDN a file is redirected to.
func TestGated(t *testing.T) {
	h := startHub(t)
	h.Commit("org/gated", "main", map[string][]byte{"model.safetensors.index.json": []byte(`{"weight_map":{"a":"model.safetensors"}}`), "model.safetensors": []byte("w")})
	h.Gate("org/gated", "hf_good")
	ctx := context.Background()
	_, _, err := (&Client{Endpoint: h.URL}).Model(ctx, "org/gated", "", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "GatedRepo") || !strings.Contains(err.Error(), "no token was sent") || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("gated, no token: %v", err)
	}
	_, _, err = (&Client{Endpoint: h.URL, Token: "hf_bad"}).Model(ctx, "org/gated", "", nil, nil)
	var he *Error
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "was refused") {
		t.Errorf("gated, wrong token: %v", err)
	} else if !errors.As(err, &he) || he.Code != "GatedRepo" {
		t.Errorf("gated: %#v", err)
	}
	hb, _, err := (&Client{Endpoint: h.URL, Token: "hf_good"}).Model(ctx, "org/gated", "", nil, nil)
	if err != nil || len(hb.Files) != 2 {
		t.Errorf("gated, its token: %+v, %v", hb, err)
	}
}

// TestTokenStaysWithTheHub: the index of an LFS-stored checkpoint is read
// through the Hub's redirect to its CDN, and the token is not sent there.
func TestTokenStaysWithTheHub(t *testing.T) {
	h := startHub(t)
	big := make([]byte, 11<<20) // over 10 MB: LFS, so redirected
	copy(big, `{"weight_map":{"a":"model.safetensors"}}`)
	for i := 40; i < len(big); i++ {
		big[i] = ' '
	}
	h.Commit("org/g", "main", map[string][]byte{"model.safetensors.index.json": big, "model.safetensors": []byte("w")})
	h.Gate("org/g", "hf_good")
	c := &Client{Endpoint: h.URL, Token: "hf_good"}
	r, err := c.Resolve(context.Background(), "org/g", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Files {
		if f.Path == "model.safetensors.index.json" {
			if f.LFS == "" {
				t.Fatal("the index was not stored as LFS; the test needs a redirect")
			}
			tr := &authRecorder{}
			c.HTTP = &http.Client{Transport: tr}
			if _, err := c.ReadFile(context.Background(), "org/g", r.Commit, f, maxIndexBytes); err != nil {
				t.Fatal(err)
			}
			if len(tr.seen) != 2 || tr.seen[0] != "Bearer hf_good" || tr.seen[1] != "" {
				t.Errorf("Authorization sent: %q; want the token to the Hub, none to the CDN", tr.seen)
			}
		}
	}
}

type authRecorder struct{ seen []string }

func (a *authRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	a.seen = append(a.seen, r.Header.Get("Authorization"))
	return http.DefaultTransport.RoundTrip(r)
}

// TestRateLimited: 429 with Retry-After is waited out as the Hub asks and
// asked again; a Retry-After longer than a person should wait at a prompt,
// or a limit that does not lift, is said.
func TestRateLimited(t *testing.T) {
	h := startHub(t)
	h.Commit("o/r", "main", map[string][]byte{"model.safetensors": []byte("w")})
	var waits []time.Duration
	c := &Client{Endpoint: h.URL, Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	h.Limit(2, 7)
	if _, err := c.Resolve(context.Background(), "o/r", ""); err != nil {
		t.Fatalf("after two 429s: %v", err)
	}
	if len(waits) != 2 || waits[0] != 7*time.Second {
		t.Errorf("waited %v, want 7s twice (Retry-After)", waits)
	}
	h.Limit(1, 3600)
	if _, err := c.Resolve(context.Background(), "o/r", ""); err == nil || !strings.Contains(err.Error(), "asks to wait 1h0m0s") {
		t.Errorf("Retry-After 3600: %v", err)
	}
	h.Limit(100, 1)
	c.Retries = 2
	if _, err := c.Resolve(context.Background(), "o/r", ""); err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Errorf("a limit that does not lift: %v", err)
	}
}

func TestNotFound(t *testing.T) {
	h := startHub(t)
	h.Commit("o/r", "main", map[string][]byte{"model.safetensors": []byte("w")})
	c := &Client{Endpoint: h.URL}
	if _, err := c.Resolve(context.Background(), "o/r", "nope"); err == nil || !NotFound(err) || !strings.Contains(err.Error(), "RevisionNotFound") || !strings.Contains(err.Error(), "after @") {
		t.Errorf("missing revision: %v", err)
	}
	if _, err := c.Resolve(context.Background(), "o/none", ""); err == nil || !NotFound(err) || !strings.Contains(err.Error(), "check the repository id") {
		t.Errorf("missing repository: %v", err)
	}
	if _, err := (&Client{Endpoint: "http://127.0.0.1:1", Retries: -1}).Resolve(context.Background(), "o/r", ""); err == nil || !strings.Contains(err.Error(), "revision main of o/r") {
		t.Errorf("no Hub: %v", err)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		g, p string
		ok   bool
	}{
		{"*.gguf", "a.gguf", true}, {"*.gguf", "sub/a.gguf", true}, {"*Q4_K_M*", "m-Q4_K_M.gguf", true},
		{"original/", "original/x/y.pth", true}, {"original/*", "original/a", true}, {"original/*", "originals/a", false},
		{"model-0000?-of-00002.safetensors", "model-00001-of-00002.safetensors", true}, {"?", "é", true}, {"??", "é", false},
		{"[abc].json", "b.json", true}, {"[!abc].json", "b.json", false}, {"[a-c]x", "bx", true}, {"[", "[", true},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"", "", true}, {"config.json", "sub/config.json", false},
	} {
		if got := Match(tc.g, tc.p); got != tc.ok {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.g, tc.p, got, tc.ok)
		}
	}
}
