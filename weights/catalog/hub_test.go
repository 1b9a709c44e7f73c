package catalog

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestValidRepoID(t *testing.T) {
	for id, ok := range map[string]bool{
		"Qwen/Qwen2.5-7B-Instruct": true, "gpt2": true, "org/tiny": true, "a_b/c.d-e": true,
		"": false, "org/": false, "/name": false, "a/b/c": false, "org--x/name": false, "org/na..me": false,
		"org/-name": false, "org/name.": false, "org/na me": false, "org/né": false, strings.Repeat("a", 97): false,
		"../etc": false, "org/..": false,
	} {
		if err := ValidRepoID(id); (err == nil) != ok {
			t.Errorf("ValidRepoID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestCheckRepoPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"config.json": true, "sub/dir/model.safetensors": true, "name with space.json": true, "é.txt": true,
		"": false, "/abs": false, "../x": false, "a/../b": false, "a//b": false, "./a": false, "a/": false,
		"a\\b": false, "a\nb": false, "\xff": false,
	} {
		if err := CheckRepoPath(p); (err == nil) != ok {
			t.Errorf("CheckRepoPath(%q) = %v, want ok=%v", p, err, ok)
		}
	}
}

func validHub() Hub {
	return Hub{Repo: "org/tiny", Revision: "main", Commit: strings.Repeat("a", 40), Files: []HubFile{
		{Path: "config.json", Size: 10, Blob: strings.Repeat("b", 40)},
		{Path: "model.safetensors", Size: 100, SHA256: strings.Repeat("c", 64)},
	}}
}

func TestCheckHub(t *testing.T) {
	if err := CheckHub(validHub()); err != nil {
		t.Fatalf("CheckHub(valid) = %v", err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Hub)
		want string
	}{
		"bad repo":      {func(h *Hub) { h.Repo = "a/b/c" }, "more than one '/'"},
		"bad commit":    {func(h *Hub) { h.Commit = "main" }, "commit \"main\" is not 40"},
		"upper commit":  {func(h *Hub) { h.Commit = strings.Repeat("A", 40) }, "not 40 lowercase"},
		"no revision":   {func(h *Hub) { h.Revision = "" }, "revision is empty"},
		"revision ..":   {func(h *Hub) { h.Revision = "../x" }, "revision \"../x\""},
		"no files":      {func(h *Hub) { h.Files = nil }, "no files selected"},
		"traversal":     {func(h *Hub) { h.Files[0].Path = "../../etc/passwd" }, "file path \"../../etc/passwd\""},
		"twice":         {func(h *Hub) { h.Files[1].Path = "config.json" }, "listed twice"},
		"two digests":   {func(h *Hub) { h.Files[0].SHA256 = strings.Repeat("c", 64) }, "exactly one of sha256"},
		"no digest":     {func(h *Hub) { h.Files[0].Blob = "" }, "exactly one of sha256"},
		"short sha":     {func(h *Hub) { h.Files[1].SHA256 = "abc" }, "not 64 lowercase"},
		"bad blob":      {func(h *Hub) { h.Files[0].Blob = strings.Repeat("z", 40) }, "not a git blob id"},
		"negative":      {func(h *Hub) { h.Files[0].Size = -1 }, "size is negative"},
		"no weights":    {func(h *Hub) { h.Files = h.Files[:1] }, "no weight file"},
		"empty glob":    {func(h *Hub) { h.Include = []string{""} }, "glob \"\""},
		"partial name":  {func(h *Hub) { h.Files[1].Path = "model.safetensors.part" }, "no weight file"},
		"too many":      {func(h *Hub) { h.Files = make([]HubFile, MaxHubFiles+1) }, "the limit is"},
		"control chars": {func(h *Hub) { h.Files[0].Path = "a\tb" }, "control character"},
		// A listing whose sizes add up past int64 made the model's size
		// negative, which every disk check then passed.
		"sizes overflow": {func(h *Hub) { h.Files[0].Size, h.Files[1].Size = 1<<62, 1<<62 }, "more than"},
		"one file huge":  {func(h *Hub) { h.Files[1].Size = 1<<63 - 1 }, "more than"},
	} {
		h := validHub()
		tc.mod(&h)
		if err := CheckHub(h); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckHub = %v, want it to say %q", name, err, tc.want)
		}
	}
}

// TestHubLayout: the paths are huggingface_hub's: models--ORG--NAME, blobs
// named by digest, links relative to their own directory, refs per
// revision, and a folder name reads back to its repository.
func TestHubLayout(t *testing.T) {
	c := "/hf"
	commit := strings.Repeat("a", 40)
	if got := HubSnapshotDir(c, "org/tiny", commit); got != "/hf/models--org--tiny/snapshots/"+commit {
		t.Errorf("HubSnapshotDir = %s", got)
	}
	if got := HubFilePath(c, "org/tiny", commit, "sub/a.json"); got != "/hf/models--org--tiny/snapshots/"+commit+"/sub/a.json" {
		t.Errorf("HubFilePath = %s", got)
	}
	for p, want := range map[string]string{"a.json": "../../blobs/X", "sub/a.json": "../../../blobs/X", "a/b/c": "../../../../blobs/X"} {
		got := HubLinkTarget(p, "X")
		if got != want {
			t.Errorf("HubLinkTarget(%q) = %q, want %q", p, got, want)
		}
		// The link resolves to the blob from the link's own directory.
		link := HubFilePath(c, "org/tiny", commit, p)
		if res := filepath.Join(filepath.Dir(link), got); res != HubBlobPath(c, "org/tiny", "X") {
			t.Errorf("link %s -> %s resolves to %s", link, got, res)
		}
	}
	if got := HubRefPath(c, "org/tiny", "refs/pr/1"); got != "/hf/models--org--tiny/refs/refs/pr/1" {
		t.Errorf("HubRefPath = %s", got)
	}
	for _, id := range []string{"org/tiny", "gpt2", "a.b/c_d"} {
		if back := HubRepoOf(RepoFolder(id)); back != id {
			t.Errorf("HubRepoOf(RepoFolder(%q)) = %q", id, back)
		}
	}
	for _, name := range []string{"datasets--a--b", "models--", "models--a--b--c", "x"} {
		if got := HubRepoOf(name); got != "" {
			t.Errorf("HubRepoOf(%q) = %q, want none", name, got)
		}
	}
	if got := HFCacheDir("/var/cache/llmgw", ""); got != "/var/cache/llmgw/hub" {
		t.Errorf("HFCacheDir default = %s", got)
	}
	if got := HFCacheDir("/var/cache/llmgw", "/shared/hf"); got != "/shared/hf" {
		t.Errorf("HFCacheDir set = %s", got)
	}
}

func TestHubRefs(t *testing.T) {
	h := validHub()
	for rev, want := range map[string]string{"main": "main", "v1.0": "main v1.0", h.Commit: "main", strings.Repeat("f", 40): "main", "refs/pr/3": "main refs/pr/3"} {
		h.Revision = rev
		if got := strings.Join(HubRefs(h), " "); got != want {
			t.Errorf("HubRefs(revision %s) = %q, want %q", rev, got, want)
		}
	}
}

func TestParseHF(t *testing.T) {
	for src, want := range map[string]HFRef{
		"hf:org/repo":                           {Repo: "org/repo"},
		"hf:org/repo@v1":                        {Repo: "org/repo", Revision: "v1"},
		"hf:org/repo/model.gguf":                {Repo: "org/repo", Path: "model.gguf"},
		"hf:org/repo@abc/sub/model.gguf":        {Repo: "org/repo", Revision: "abc", Path: "sub/model.gguf"},
		"hf:org/repo@refs/pr/12":                {Repo: "org/repo", Revision: "refs/pr/12"},
		"hf:org/repo@refs/pr/12/config.json":    {Repo: "org/repo", Revision: "refs/pr/12", Path: "config.json"},
		"hf:org/repo@feature%2Fx/a.json":        {Repo: "org/repo", Revision: "feature/x", Path: "a.json"},
		"hf:org/repo@refs/convert/parquet/a.pq": {Repo: "org/repo", Revision: "refs/convert/parquet", Path: "a.pq"},
	} {
		got, err := ParseHF(src)
		if err != nil || got != want {
			t.Errorf("ParseHF(%q) = %+v, %v; want %+v", src, got, err, want)
		}
	}
	for src, msg := range map[string]string{
		"hf:org":                  "write hf:ORG/NAME",
		"hf:org/":                 "write hf:ORG/NAME",
		"hf:org/repo@":            "empty revision",
		"hf:org/repo@refs/pr/x/a": "not a pull request",
		"hf:org/repo/../x":        `file path "../x"`,
		"hf:org/repo@%zz/a":       "not validly escaped",
		"hf:org/re po":            "may hold only",
		"hf:org/repo@..%2Fx":      `revision "../x"`,
		"https://x/y":             "not an hf: source",
	} {
		if _, err := ParseHF(src); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseHF(%q) = %v, want it to say %q", src, err, msg)
		}
	}
}

// TestHubModelsWantNoCacheName: a Hub model's files live in the Hugging
// Face cache, so no cache name is wanted for its source, and it is never
// pinned by a node: its commit and the Hub's digests pin it.
func TestHubModelsWantNoCacheName(t *testing.T) {
	h := validHub()
	m := Model{Name: "tiny", Source: HubSource(h.Repo, h.Commit), Hub: &h}
	if w := WantedCacheNames([]Model{m}); len(w) != 0 {
		t.Errorf("WantedCacheNames(hub model) = %v", w)
	}
	if m.NeedsPin() {
		t.Error("a Hub model needs no pin")
	}
	if KindOf(m.Source) != KindRemote {
		t.Errorf("a Hub model's source %s is not remote: an older agent would not refuse it", m.Source)
	}
}

// TestGitBlobID: the id git gives a file ("git hash-object"), which the
// Hub publishes for a small file.
func TestGitBlobID(t *testing.T) {
	for content, want := range map[string]string{
		"":              "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", // git hash-object /dev/null
		"hello world\n": "3b18e512dba79e4c8300dd08aeb37f8e728b8dad",
	} {
		if got := GitBlobID([]byte(content)); got != want {
			t.Errorf("GitBlobID(%q) = %s, want %s", content, got, want)
		}
		if err := CheckHubDigest(HubFile{Blob: want}, []byte(content)); err != nil {
			t.Errorf("CheckHubDigest(%q) = %v", content, err)
		}
	}
	if err := CheckHubDigest(HubFile{Blob: strings.Repeat("0", 40)}, []byte("x")); err == nil || !strings.Contains(err.Error(), "the Hub publishes") {
		t.Errorf("CheckHubDigest(wrong blob) = %v", err)
	}
	if err := CheckHubDigest(HubFile{SHA256: strings.Repeat("0", 64)}, []byte("x")); err == nil {
		t.Error("CheckHubDigest(wrong sha256) passed")
	}
}

// TestHubPath: a job is given the snapshot, or a split GGUF's first part
// when the model's weights are GGUF (llama.cpp's -m opens no directory).
func TestHubPath(t *testing.T) {
	h := validHub()
	snap := HubSnapshotDir("/hf", h.Repo, h.Commit)
	if got := HubPath("/hf", h); got != snap {
		t.Errorf("HubPath(safetensors) = %s, want %s", got, snap)
	}
	h.Files = []HubFile{{Path: "README.md", Blob: strings.Repeat("a", 40)},
		{Path: "q4/m-Q4-00002-of-00002.gguf", SHA256: strings.Repeat("b", 64)}, {Path: "q4/m-Q4-00001-of-00002.gguf", SHA256: strings.Repeat("c", 64)}}
	if got := HubPath("/hf", h); got != snap+"/q4/m-Q4-00001-of-00002.gguf" {
		t.Errorf("HubPath(split GGUF) = %s, want its first part", got)
	}
}
