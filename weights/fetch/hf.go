package fetch

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/weights/catalog"
)

// defaultHFEndpoint is the public hub; HF_ENDPOINT overrides it for mirrors,
// as it does for huggingface_hub, vLLM and SGLang.
const defaultHFEndpoint = "https://huggingface.co"

// remote is a fetchable source, resolved to something to GET.
type remote struct {
	source string // as given to Ensure
	url    string // what to GET
	hf     bool   // an hf: source: the hub's headers are trusted for the digest
	// hubHost is the host the hub token may be sent to: it keeps the token
	// off any request not aimed at the hub in the first place. Redirects
	// are stripCredentials' business.
	hubHost string
	// slashHint, for an hf: source with an explicit revision and a file
	// path of several segments, is the same source with the revision's
	// slash escaped: a 404 may be a branch feature/x written unescaped.
	slashHint string
}

// parseRemote resolves an hf: or http(s):// source. endpoint is the hub's
// base URL for hf: sources.
//
// hf: names one file in a repository, which is what a GGUF is:
// hf:org/repo/path/in/repo, or hf:org/repo@revision/path to pin a branch, tag
// or commit. A whole repository of shards is deliberately not fetched here:
// vLLM and SGLang download those themselves and do it well, and a snapshot
// downloader competing with them would be work spent to arrive back where we
// started.
func parseRemote(source, endpoint string) (remote, error) {
	if rest, ok := strings.CutPrefix(source, "hf:"); ok {
		return parseHF(source, rest, endpoint)
	}
	u, err := url.Parse(source)
	if err != nil {
		return remote{}, fmt.Errorf("malformed URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return remote{}, fmt.Errorf("unknown scheme %q; llmgw fetches hf: and http(s):// sources", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return remote{}, errors.New("malformed URL: no host")
	}
	if u.Path == "" || strings.HasSuffix(u.Path, "/") {
		return remote{}, errors.New("URL names a directory, not a file; give the URL of the weights file itself")
	}
	return remote{source: source, url: u.String()}, nil
}

func parseHF(source, rest, endpoint string) (remote, error) {
	parts := strings.Split(rest, "/")
	notFile := fmt.Errorf("%s names a repository, not a file; give the file as hf:org/repo/model.gguf, "+
		"or use the repository id directly and let the engine download it", source)
	if len(parts) < 3 || parts[len(parts)-1] == "" {
		return remote{}, notFile
	}
	org, repo := parts[0], parts[1]
	file := parts[2:]
	rev := "main"
	explicitRev := false
	if r, v, ok := strings.Cut(repo, "@"); ok {
		explicitRev = true
		if v == "" {
			return remote{}, errors.New("empty revision after @; write hf:org/repo@REVISION/file")
		}
		repo, rev = r, v
		// The hub's own revisions with slashes (refs/pr/N, refs/convert/NAME)
		// are written as the hub's pages write them; they are three
		// segments. Any other revision with a slash (a branch feature/x)
		// is given escaped, feature%2Fx, since nothing else says where it
		// ends and the file begins.
		if rev == "refs" {
			if len(file) < 3 {
				return remote{}, fmt.Errorf("%s: a revision refs/... is refs/pr/NUMBER or refs/convert/NAME, followed by the file", source)
			}
			if file[0] == "pr" {
				if _, err := strconv.ParseUint(file[1], 10, 32); err != nil {
					return remote{}, fmt.Errorf("%s: refs/pr/%s is not a pull request; write refs/pr/NUMBER", source, file[1])
				}
			}
			rev, file = "refs/"+file[0]+"/"+file[1], file[2:]
		} else if u, err := url.PathUnescape(rev); err == nil {
			rev = u
		} else {
			return remote{}, fmt.Errorf("%s: revision %q is not validly escaped", source, rev)
		}
	}
	if org == "" || repo == "" || rev == "" {
		return remote{}, errors.New("malformed hub source; write hf:org/repo/file or hf:org/repo@revision/file")
	}
	for i, seg := range file {
		if seg == "" || seg == "." || seg == ".." {
			return remote{}, fmt.Errorf("malformed file path %q in hub source", strings.Join(file, "/"))
		}
		file[i] = url.PathEscape(seg)
	}
	base, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return remote{}, fmt.Errorf("hub endpoint %q (HF_ENDPOINT) is not an http(s) URL", endpoint)
	}
	// The revision is one path segment with its slashes escaped, refs/pr/1
	// as refs%2Fpr%2F1: what huggingface_hub's hf_hub_url sends
	// (quote(revision, safe="")), while the file's slashes stay slashes.
	u := base.String() + "/" + url.PathEscape(org) + "/" + url.PathEscape(repo) +
		"/resolve/" + url.PathEscape(rev) + "/" + strings.Join(file, "/")
	rem := remote{source: source, url: u, hf: true, hubHost: base.Host}
	if explicitRev && !strings.HasPrefix(rev, "refs/") && len(file) >= 2 {
		rem.slashHint = "hf:" + org + "/" + repo + "@" + url.PathEscape(rev+"/"+file[0]) + "/" + strings.Join(file[1:], "/")
	}
	return rem, nil
}

// stripCredentials reports whether a redirect from one URL to another must
// lose the Authorization header: on any change of scheme, host or port, as
// huggingface_hub does (through requests' rebuild_auth). Go's client keeps
// it for a subdomain and for another port of the same host, which for the
// hub (huggingface.co redirecting to cdn-lfs.huggingface.co) would hand
// the user's token to the storage backend.
func stripCredentials(from, to *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return !strings.EqualFold(from.Scheme, to.Scheme) || !strings.EqualFold(from.Hostname(), to.Hostname()) || port(from) != port(to)
}

// checkModelID refuses what looks like a URL in a scheme llmgw does not
// fetch. Without this, "s3://bucket/model.gguf" would be handed to the engine
// as a model id and fail there, far from the mistake. A hub model id has no
// colon before its first slash.
func checkModelID(source string) error {
	i := strings.IndexByte(source, ':')
	if i > 0 && !strings.Contains(source[:i], "/") {
		return fmt.Errorf("unknown scheme %q; llmgw fetches hf: and http(s):// sources, "+
			"checks /paths, and passes bare model ids (org/name) to the engine", source[:i])
	}
	return nil
}

func (f *Fetcher) hfEndpoint() string {
	if f.HFEndpoint != "" {
		return f.HFEndpoint
	}
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		return e
	}
	return defaultHFEndpoint
}

// hfToken is the hub token: HFToken, else $HF_TOKEN, else the file
// $HF_TOKEN_PATH names, else HFTokenFile, else the file huggingface-cli
// login writes ($HF_HOME/token, else ~/.cache/huggingface/token). "" when
// there is none, which is fine for public models.
//
// HFTokenFile is a secret llmgw is configured to read, as root, in the
// agent: it must pass catalog.CheckPrivate, or an ordinary user who owns
// it (or anyone, when it is world-readable) has the site's hub token. The
// error refuses the fetch rather than go on without the token, which would
// fail later as a gated model with no word of why.
func (f *Fetcher) hfToken() (string, error) {
	if f.HFToken != "" {
		return f.HFToken, nil
	}
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return t, nil
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" && f.HFTokenFile != "" {
		if err := catalog.CheckPrivate("hf_token_file", f.HFTokenFile); err != nil {
			return "", err
		}
		path = f.HFTokenFile
	}
	if path == "" {
		home := os.Getenv("HF_HOME")
		if home == "" {
			cache := os.Getenv("XDG_CACHE_HOME")
			if cache == "" {
				h, err := os.UserHomeDir()
				if err != nil {
					return "", nil
				}
				cache = filepath.Join(h, ".cache")
			}
			home = filepath.Join(cache, "huggingface")
		}
		path = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil
	}
	return strings.TrimSpace(string(b)), nil
}

// hubSHA256 is the sha256 the hub publishes for an LFS file, found in
// X-Linked-Etag on the hub's own response — the redirect to the storage
// backend, so the response chain is walked. Non-LFS files carry a git blob
// id there instead, which is not a sha256 and is ignored.
func hubSHA256(resp *http.Response) string {
	for r := resp; r != nil; {
		v := strings.Trim(strings.TrimPrefix(r.Header.Get("X-Linked-Etag"), "W/"), `"`)
		if catalog.ValidSHA256(v) {
			return strings.ToLower(v)
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	return ""
}

// maxOrigin bounds the origin's validator as recorded: it is shown to
// admins and sent to the coordinator, and an origin chooses its length.
const maxOrigin = 256

// originOf is how the origin named the version of the bytes it served, for
// the coordinator to record beside a pin (api.PinRequest.ETag): the hub's
// X-Repo-Commit (the revision's commit) and X-Linked-Etag (the LFS file's
// sha256, or a git blob id), found on the hub's own response before its
// redirect to storage; else the ETag; else Last-Modified. "" when there is
// none. A digest alone says which bytes; this says which version of the
// repository or file they were, which is what an admin deciding whether to
// repin asks the origin about.
func originOf(resp *http.Response) string {
	var commit, linked string
	for r := resp; r != nil; {
		if commit == "" {
			commit = r.Header.Get("X-Repo-Commit")
		}
		if linked == "" {
			linked = r.Header.Get("X-Linked-Etag")
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	var parts []string
	switch {
	case commit != "" || linked != "":
		if commit != "" {
			parts = append(parts, "X-Repo-Commit: "+commit)
		}
		if linked != "" {
			parts = append(parts, "X-Linked-Etag: "+linked)
		}
	case resp.Header.Get("ETag") != "":
		parts = append(parts, "ETag: "+resp.Header.Get("ETag"))
	case resp.Header.Get("Last-Modified") != "":
		parts = append(parts, "Last-Modified: "+resp.Header.Get("Last-Modified"))
	}
	o := strings.Join(parts, ", ")
	// Header values may hold any byte but control characters; keep it
	// one printable line of bounded length.
	o = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, o)
	if len(o) > maxOrigin {
		o = o[:maxOrigin]
	}
	return o
}

// hintFor adds what a person can do about a status, for the common ones.
func hintFor(rem remote, code int) string {
	switch {
	case rem.hf && (code == http.StatusUnauthorized || code == http.StatusForbidden):
		return "; the model may be gated or private: accept its license on the hub and set HF_TOKEN (or run huggingface-cli login)"
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return "; the origin refused access"
	case code == http.StatusNotFound && rem.slashHint != "":
		return "; check the repository, revision and file name on the hub. A branch with a slash in its name is written escaped, %2F for the slash: if the branch is the revision and the first part of the path, write " + rem.slashHint
	case code == http.StatusNotFound && rem.hf:
		return "; check the repository, revision and file name on the hub"
	case code == http.StatusNotFound:
		return "; check the URL"
	}
	return ""
}
