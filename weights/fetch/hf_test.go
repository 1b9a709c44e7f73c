package fetch

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestParseRemote(t *testing.T) {
	for _, tc := range []struct {
		source, want string
	}{
		{"hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf",
			"https://hub.test/Qwen/Qwen2.5-7B-Instruct-GGUF/resolve/main/qwen2.5-7b-instruct-q4_k_m.gguf"},
		{"hf:org/repo@v1.0/sub/dir/model.gguf", "https://hub.test/org/repo/resolve/v1.0/sub/dir/model.gguf"},
		{"hf:org/repo@0123abcd/model.gguf", "https://hub.test/org/repo/resolve/0123abcd/model.gguf"},
		{"hf:org/repo/name with space.gguf", "https://hub.test/org/repo/resolve/main/name%20with%20space.gguf"},
		{"https://cdn.example.com/m/model.gguf?sig=abc", "https://cdn.example.com/m/model.gguf?sig=abc"},
		{"http://127.0.0.1:8080/model.gguf", "http://127.0.0.1:8080/model.gguf"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			got, err := parseRemote(tc.source, "https://hub.test/")
			if err != nil || got.url != tc.want {
				t.Errorf("parseRemote(%q) = %q, %v; want %q", tc.source, got.url, err, tc.want)
			}
			if strings.HasPrefix(tc.source, "hf:") != got.hf {
				t.Errorf("parseRemote(%q).hf = %v", tc.source, got.hf)
			}
		})
	}
	if _, err := parseRemote("hf:org/repo/m.gguf", "ftp://mirror"); err == nil || !strings.Contains(err.Error(), "HF_ENDPOINT") {
		t.Errorf("a non-http hub endpoint = %v, want an error naming HF_ENDPOINT", err)
	}
}

func TestCheckModelID(t *testing.T) {
	for id, ok := range map[string]bool{
		"Qwen/Qwen2.5-7B-Instruct": true,
		"gpt2":                     true,
		"library/llama3:8b":        true, // a tag after the slash is the engine's business
		"s3://bucket/x":            false,
		"gs:bucket/x":              false,
		"HF:org/repo/x":            false,
	} {
		if err := checkModelID(id); (err == nil) != ok {
			t.Errorf("checkModelID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestEnsureHub(t *testing.T) {
	t.Run("resolves against the endpoint, sends the token, checks the hub digest", func(t *testing.T) {
		o := newFakeOrigin(t, 200<<10)
		o.hub, o.linkedEtag = true, sha256Hex(o.data)
		f := testFetcher(t)
		f.HFEndpoint, f.HFToken = o.srv.URL, "hf_secret"
		src := "hf:org/repo@v2/model.gguf"
		assertFile(t, mustEnsure(t, f, src, Want{}), o.data)
		reqs := o.requests()
		if len(reqs) != 2 || reqs[0].Status != http.StatusFound || reqs[0].Auth != "Bearer hf_secret" {
			t.Errorf("requests %+v; want the hub's redirect, asked with the token, then the file", reqs)
		}
		if got := catalog.CachePathFor(f.CacheDir, src); !strings.HasSuffix(got, "-model.gguf") {
			t.Errorf("cache path %s", got)
		}
	})
	t.Run("hub digest mismatch deletes the download", func(t *testing.T) {
		o := newFakeOrigin(t, 200<<10)
		o.hub, o.linkedEtag = true, strings.Repeat("0", 64)
		f := testFetcher(t)
		f.HFEndpoint = o.srv.URL
		src := "hf:org/repo/model.gguf"
		failedFetch(t, f, src, Want{}, "sha256 mismatch: expected "+strings.Repeat("0", 64))
		assertAbsent(t, catalog.CachePathFor(f.CacheDir, src)+catalog.PartSuffix)
	})
	t.Run("catalog and hub disagree", func(t *testing.T) {
		o := newFakeOrigin(t, 200<<10)
		o.hub, o.linkedEtag = true, sha256Hex(o.data)
		f := testFetcher(t)
		f.HFEndpoint = o.srv.URL
		failedFetch(t, f, "hf:org/repo/model.gguf", Want{SHA256: strings.Repeat("1", 64)}, "but the hub publishes "+sha256Hex(o.data))
	})
	t.Run("gated model", func(t *testing.T) {
		o := newFakeOrigin(t, 1024)
		o.hub, o.status = true, []int{401}
		f := testFetcher(t)
		f.HFEndpoint = o.srv.URL
		failedFetch(t, f, "hf:org/gated/model.gguf", Want{}, "this node sent no token: accept its terms on the Hub with an account that may read it, and give that account's token to the node (hf_token_file in agent.toml")
		o.set(func(o *fakeOrigin) { o.status = []int{401} })
		f.HFToken = "hf_refused"
		failedFetch(t, f, "hf:org/gated/model.gguf", Want{}, "the Hub refused the token this node sent (hf_token_file in agent.toml")
	})
}

func TestHFToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("hf_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", tokenFile)
	if got, _ := (&Fetcher{}).hfToken(); got != "hf_fromfile" {
		t.Errorf("token from HF_TOKEN_PATH = %q", got)
	}
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_HOME", dir)
	if got, _ := (&Fetcher{}).hfToken(); got != "hf_fromfile" {
		t.Errorf("token from HF_HOME/token = %q", got)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if got, _ := (&Fetcher{}).hfToken(); got != "hf_env" {
		t.Errorf("HF_TOKEN should win over the file, got %q", got)
	}
	if got, _ := (&Fetcher{HFToken: "hf_field"}).hfToken(); got != "hf_field" {
		t.Errorf("HFToken should win, got %q", got)
	}
	t.Setenv("HF_ENDPOINT", "https://mirror.test")
	if got := (&Fetcher{}).hfEndpoint(); got != "https://mirror.test" {
		t.Errorf("hfEndpoint with HF_ENDPOINT = %q", got)
	}
}

// TestEnsureHubRefusesForeignTokenFile: hf_token_file is read by the agent
// as root. A 0600 file owned by an ordinary user is that user's to read and
// to replace, and a world-readable one is everyone's: both are refused,
// naming the file and the fix, before anything is sent to the hub.
func TestEnsureHubRefusesForeignTokenFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	for k := range map[string]bool{"HF_TOKEN": true, "HF_TOKEN_PATH": true} {
		t.Setenv(k, "")
	}
	o := newFakeOrigin(t, 1024)
	o.hub = true
	f := testFetcher(t)
	f.HFEndpoint = o.srv.URL
	f.HFTokenFile = filepath.Join(t.TempDir(), "hf.token")
	if err := os.WriteFile(f.HFTokenFile, []byte("hf_users\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f.HFTokenFile, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	failedFetch(t, f, "hf:org/repo/model.gguf", Want{}, f.HFTokenFile+" is owned by uid 65534")
	failedFetch(t, f, "hf:org/repo/model.gguf", Want{}, "chown root:root "+f.HFTokenFile)
	if reqs := o.requests(); len(reqs) != 0 {
		t.Errorf("requests %+v; want none sent with a refused token file", reqs)
	}
	os.Chown(f.HFTokenFile, 0, 0)
	os.Chmod(f.HFTokenFile, 0o644)
	failedFetch(t, f, "hf:org/repo/model.gguf", Want{}, "chmod 600 "+f.HFTokenFile)
	os.Chmod(f.HFTokenFile, 0o600)
	if tok, err := f.hfToken(); err != nil || tok != "hf_users" {
		t.Errorf("hfToken of a root-owned 0600 file = %q, %v", tok, err)
	}
}
