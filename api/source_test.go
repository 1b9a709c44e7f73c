package api

import (
	"net/url"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

func TestCheckSource(t *testing.T) {
	good := []string{
		"/models/llama.gguf",
		"/models/llama/",
		"hf:org/repo/model.gguf",
		"hf:Qwen/Qwen2.5-7B-GGUF@main/sub/dir/q4.gguf",
		"hf:org/repo@refs/pr/1/m.gguf",
		"https://example.org/m.gguf",
		"http://127.0.0.1:8080/x/m.gguf?X-Amz-Signature=abc&X-Amz-Expires=60",
		"Qwen/Qwen2.5-7B-Instruct",
		"Qwen/Qwen2.5-7B-Instruct@v1.0",
		"gpt2",
	}
	for _, s := range good {
		if err := CheckSource(s); err != nil {
			t.Errorf("CheckSource(%q) = %v, want nil", s, err)
		}
	}
	for src, want := range map[string]string{
		"":                                     "empty",
		"file:///etc/shadow":                   `scheme "file"`,
		"ftp://mirror.example/m.gguf":          `scheme "ftp"`,
		"s3://bucket/m.gguf":                   `scheme "s3"`,
		"FILE:/etc/shadow":                     `scheme "FILE"`,
		"hf:../../x.gguf":                      "not a hub name",
		"hf:org/../x.gguf":                     "not a hub name",
		"hf:./repo/x.gguf":                     "not a hub name",
		"hf:org/repo@../../x.gguf":             "'..' segment",
		"hf:org/repo/../../../x.gguf":          "'..' segment",
		"hf:org/repo/a//x.gguf":                "empty",
		"hf:org/repo":                          "names no file",
		"hf:org/re%2e%2e/x.gguf":               "not a hub name",
		"https://user:pass@example.org/m.gguf": "user name or password",
		"https://token@example.org/m.gguf":     "user name or password",
		"https:///m.gguf":                      "no host",
		"https://example.org/dir/":             "directory",
		"./m.gguf":                             "relative",
		"../m.gguf":                            "relative",
		"models/sub/m.gguf":                    "not a model id",
		"../x":                                 "relative",
		"org/..":                               "not a hub name",
		"/m/a b":                               "white space",
		"/m/a\x1b[2J":                          "control",
		"/m/\u009b":                            "control",
		"/m/\xff":                              "UTF-8",
		"/" + strings.Repeat("a", 5000):        "limit",
	} {
		err := CheckSource(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSource(%q) = %v, want an error with %q", src, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pass@example") {
			t.Errorf("CheckSource(%q) repeats the password: %v", src, err)
		}
	}
}

func TestRedactSource(t *testing.T) {
	signed := RedactSource("https://b.example/m.gguf?X-Amz-Signature=abc")
	for in, want := range map[string]string{
		"https://b.example/m.gguf?X-Amz-Signature=abc": signed,
		"https://u:p@b.example/m.gguf":                 "https://b.example/m.gguf",
		"https://b.example/m.gguf":                     "https://b.example/m.gguf",
		"hf:org/repo/m.gguf":                           "hf:org/repo/m.gguf",
		"/models/a?b":                                  "/models/a?b",
		"http://[::1%zz/m?sig=1":                       "http://REDACTED",
		signed:                                         signed,
	} {
		if got := RedactSource(in); got != want {
			t.Errorf("RedactSource(%q) = %q, want %q", in, got, want)
		}
	}
	if !strings.HasPrefix(signed, "https://b.example/m.gguf?REDACTED-") || strings.Contains(signed, "abc") {
		t.Errorf("a signed URL is shown as %q", signed)
	}
	if RedactSource("https://b.example/m.gguf?sig=1") == RedactSource("https://b.example/m.gguf?sig=2") {
		t.Error("two queries redact alike; their cache files would collide")
	}
	// The redacted form names the same cache file as the whole source, so
	// a reader of the redacted catalog finds what the fetcher wrote.
	full := "https://b.example/m.gguf?X-Amz-Signature=abc"
	if catalog.CacheName(full) != catalog.CacheName(catalog.RedactQuery(full)) {
		t.Error("a source and its redaction name different cache files")
	}
}

// FuzzCheckSource checks what CheckSource promises the fetcher and the
// open read: whatever it accepts is an absolute path, a model id, or a
// remote source whose URL cannot climb out of its base and carries no
// credentials. The seeds run in every go test.
func FuzzCheckSource(f *testing.F) {
	for _, s := range []string{
		"/m/a.gguf", "hf:org/repo/m.gguf", "hf:../../x.gguf", "hf:org/repo@../m.gguf",
		"https://u:p@h/m.gguf", "file:///etc/shadow", "ftp://h/m", "https://h/m.gguf?sig=1",
		"Qwen/Qwen2.5", "org/..", "https://h/%2e%2e/m.gguf", "hf:org/repo/a/./b.gguf",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckSource(s) != nil {
			return
		}
		switch {
		case strings.HasPrefix(s, "/"):
		case strings.HasPrefix(s, "hf:"):
			parts := strings.Split(strings.TrimPrefix(s, "hf:"), "/")
			for _, p := range parts {
				for _, seg := range strings.Split(p, "@") {
					if seg == ".." || seg == "." {
						t.Fatalf("accepted %q, which has a %q segment", s, seg)
					}
				}
			}
		case strings.HasPrefix(s, "http://"), strings.HasPrefix(s, "https://"):
			u, err := url.Parse(s)
			if err != nil || u.User != nil || u.Hostname() == "" {
				t.Fatalf("accepted %q: parse %v, user %v, host %q", s, err, u.User, u.Hostname())
			}
		default:
			if strings.Contains(s, ":") || strings.HasPrefix(s, ".") && catalog.KindOf(s) == catalog.KindPath {
				t.Fatalf("accepted %q as a model id", s)
			}
			id, _, _ := strings.Cut(s, "@")
			for _, seg := range strings.Split(id, "/") {
				if seg == "." || seg == ".." || seg == "" {
					t.Fatalf("accepted model id %q with segment %q", s, seg)
				}
			}
		}
		if r := RedactSource(s); strings.Contains(r, "@") && strings.Contains(r, "://") && strings.Index(r, "@") < strings.IndexByte(r[8:], '/')+8 {
			t.Fatalf("RedactSource(%q) = %q keeps userinfo", s, r)
		}
	})
}
