package fetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The origin's rules: what is asked for, what is accepted, and who is told
// the token.

// TestEnsureRefusesEncodedBody: an origin that answers with
// Content-Encoding: gzip despite Accept-Encoding: identity sends bytes that
// are not the file; they must never be renamed into place.
func TestEnsureRefusesEncodedBody(t *testing.T) {
	o := newFakeOrigin(t, 64<<10)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(o.data)
	zw.Close()
	o.override = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", fmt.Sprint(zipped.Len()))
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(200)
		w.Write(zipped.Bytes())
	}
	f := testFetcher(t)
	failedFetch(t, f, o.url(), Want{}, "Content-Encoding: gzip")
	assertAbsent(t, catalog.CachePathFor(f.CacheDir, o.url()))
	for _, r := range o.requests() {
		if r.AcceptEncoding != "identity" {
			t.Errorf("request asked Accept-Encoding %q, want identity", r.AcceptEncoding)
		}
	}
}

// TestEnsureShortBodyRetries: a single-stream body that ends cleanly
// (chunked, so no length check in the client) short of the size its
// Content-Range announced is retried from where it stopped, as the parallel
// path does, instead of failing the fetch.
func TestEnsureShortBodyRetries(t *testing.T) {
	o := newFakeOrigin(t, 256<<10)
	var n atomic.Int32
	o.override = func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			w.Header().Set("ETag", `"v1"`)
			http.ServeContent(w, r, "model.gguf", o.mod, bytes.NewReader(o.data))
			return
		}
		size := len(o.data)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", size-1, size))
		w.WriteHeader(http.StatusPartialContent)
		http.NewResponseController(w).Flush() // chunked: no Content-Length
		w.Write(o.data[:size/2])
	}
	f := testFetcher(t)
	assertFile(t, mustEnsure(t, f, o.url(), Want{}), o.data)
	reqs := o.requests()
	if len(reqs) != 2 || reqs[1].Range != fmt.Sprintf("bytes=%d-", len(o.data)/2) {
		t.Errorf("requests %+v; want a retry from the half that arrived", reqs)
	}
}

// hostsClient is an HTTP/1.1 client that dials 127.0.0.1 for every host
// name, so a test can have a hub and its CDN on different names (a
// subdomain, another host) without DNS.
func hostsClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, "127.0.0.1:"+port)
		},
		DisableCompression: true,
	}}
}

// TestEnsureTokenStaysWithItsHost: the hub redirects to its storage; the
// token goes to the hub and to nothing else — not a subdomain
// (huggingface.co → cdn-lfs.huggingface.co is the real case), not another
// host, not another port of the same host — as huggingface_hub does.
func TestEnsureTokenStaysWithItsHost(t *testing.T) {
	for _, tc := range []struct {
		name string
		cdn  func(cdnPort, hubPort string) string
	}{
		{"subdomain", func(cp, _ string) string { return "http://cdn.hub.test:" + cp }},
		{"other host", func(cp, _ string) string { return "http://storage.test:" + cp }},
		{"other port", func(cp, _ string) string { return "http://hub.test:" + cp }},
		{"same host and port keeps it", func(_, hp string) string { return "http://hub.test:" + hp }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := newFakeOrigin(t, 64<<10)
			cdn := hub
			if !strings.Contains(tc.name, "keeps") {
				cdn = newFakeOrigin(t, 64<<10)
				cdn.setData(hub.data, `"v1"`)
			}
			port := func(o *fakeOrigin) string { u, _ := url.Parse(o.srv.URL); return u.Port() }
			hub.hub, hub.redirectTo = true, tc.cdn(port(cdn), port(hub))
			f := testFetcher(t)
			f.Client = hostsClient()
			f.HFEndpoint, f.HFToken = "http://hub.test:"+port(hub), "hf_secret"
			assertFile(t, mustEnsure(t, f, "hf:org/repo/model.gguf", Want{}), hub.data)
			if r := hub.requests()[0]; r.Auth != "Bearer hf_secret" {
				t.Errorf("the hub was asked with Authorization %q, want the token", r.Auth)
			}
			last := cdn.requests()[len(cdn.requests())-1]
			keeps := strings.Contains(tc.name, "keeps")
			if keeps && last.Auth != "Bearer hf_secret" {
				t.Errorf("a redirect within the hub lost the token")
			}
			if !keeps && last.Auth != "" {
				t.Errorf("the redirect target %s was sent Authorization %q", hub.redirectTo, last.Auth)
			}
		})
	}
}

// TestStripsCredentials: the rule itself, for the changes a test server
// cannot easily make (the scheme).
func TestStripsCredentials(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		strip    bool
	}{
		{"https://huggingface.co/a", "https://huggingface.co/b", false},
		{"https://huggingface.co/a", "https://huggingface.co:443/b", false},
		{"https://huggingface.co/a", "http://huggingface.co/b", true},
		{"https://huggingface.co/a", "https://cdn-lfs.huggingface.co/b", true},
		{"https://huggingface.co/a", "https://huggingface.co:8443/b", true},
		{"https://HuggingFace.co/a", "https://huggingface.co/b", false},
	} {
		from, _ := url.Parse(tc.from)
		to, _ := url.Parse(tc.to)
		if got := StripCredentials(from, to); got != tc.strip {
			t.Errorf("StripCredentials(%s → %s) = %v, want %v", tc.from, tc.to, got, tc.strip)
		}
	}
}

// TestEnsureHubRevisions: a revision is sent as huggingface_hub sends it,
// one path segment with its slashes escaped (quote(revision, safe="")),
// whether the source spells it with slashes (refs/pr/1, as the hub's own
// pages do) or already escaped.
func TestEnsureHubRevisions(t *testing.T) {
	for _, tc := range []struct{ source, uri string }{
		{"hf:org/repo/model.gguf", "/org/repo/resolve/main/model.gguf"},
		{"hf:org/repo@v1.0/model.gguf", "/org/repo/resolve/v1.0/model.gguf"},
		{"hf:org/repo@0123abcd/sub/dir/model.gguf", "/org/repo/resolve/0123abcd/sub/dir/model.gguf"},
		{"hf:org/repo@refs/pr/1/model.gguf", "/org/repo/resolve/refs%2Fpr%2F1/model.gguf"},
		{"hf:org/repo@refs/pr/12/sub/model.gguf", "/org/repo/resolve/refs%2Fpr%2F12/sub/model.gguf"},
		{"hf:org/repo@refs/convert/parquet/model.gguf", "/org/repo/resolve/refs%2Fconvert%2Fparquet/model.gguf"},
		{"hf:org/repo@refs%2Fpr%2F1/model.gguf", "/org/repo/resolve/refs%2Fpr%2F1/model.gguf"},
		{"hf:org/repo@feature%2Fx/model.gguf", "/org/repo/resolve/feature%2Fx/model.gguf"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			o := newFakeOrigin(t, 16<<10)
			o.hub = true
			f := testFetcher(t)
			f.HFEndpoint = o.srv.URL
			assertFile(t, mustEnsure(t, f, tc.source, Want{}), o.data)
			if got := o.requests()[0].URI; got != tc.uri {
				t.Errorf("asked the hub for %s, want %s", got, tc.uri)
			}
		})
	}
	f := testFetcher(t)
	for _, bad := range []string{"hf:org/repo@refs/pr/model.gguf", "hf:org/repo@refs/pr/1"} {
		if _, err := f.Ensure(context.Background(), bad, Want{}); err == nil {
			t.Errorf("Ensure(%q) succeeded; a revision refs/pr/N needs its number and a file after it", bad)
		}
	}
}

// TestHFTokenWithoutHome: slurmd's Prolog may run with no $HOME; the token
// is then found from HF_TOKEN, HF_TOKEN_PATH, or the file agent.toml names.
func TestHFTokenWithoutHome(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "conf-token")
	path := filepath.Join(dir, "path-token")
	os.WriteFile(conf, []byte("hf_conf\n"), 0o600)
	os.WriteFile(path, []byte("hf_path\n"), 0o600)
	for _, k := range []string{"HOME", "HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME"} {
		t.Setenv(k, "")
	}
	f := &Fetcher{HFTokenFile: conf}
	if got, _ := f.hfToken(); got != "hf_conf" {
		t.Errorf("token with only the configured file = %q, want hf_conf", got)
	}
	t.Setenv("HF_TOKEN_PATH", path)
	if got, _ := f.hfToken(); got != "hf_path" {
		t.Errorf("HF_TOKEN_PATH should win over the configured file, got %q", got)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	if got, _ := f.hfToken(); got != "hf_env" {
		t.Errorf("HF_TOKEN should win, got %q", got)
	}
}
