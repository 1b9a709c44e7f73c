package fetch

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

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
	// are StripCredentials' business.
	hubHost string
	// progress, when set, is told the download's bytes instead of
	// OnProgress: a file of a Hub model reports as part of the model.
	progress func(done, total int64)
	// quiet logs the file's start and end at debug: a file of a Hub
	// model, whose fetch as a whole logs them (EnsureHub).
	quiet bool
	// slashHint, for an hf: source with an explicit revision and a file
	// path of several segments, is the same source with the revision's
	// slash escaped: a 404 may be a branch feature/x written unescaped.
	slashHint string
}

// levelOf is the level a fetch of rem logs its start and end at.
func levelOf(rem remote) logrus.Level {
	if rem.quiet {
		return logrus.DebugLevel
	}
	return logrus.InfoLevel
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
	if strings.HasPrefix(source, "hf:") {
		return parseHF(source, endpoint)
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

func parseHF(source, endpoint string) (remote, error) {
	notFile := fmt.Errorf("%s names a repository, not a file; a repository is a model (llmgw models add NAME %s), "+
		"which the Prolog of a job that asks for it fetches; one file is hf:org/repo/model.gguf", source, source)
	ref, err := catalog.ParseHF(source)
	if err != nil {
		if !strings.Contains(strings.TrimPrefix(source, "hf:"), "/") {
			return remote{}, notFile
		}
		// The *Error this becomes names the source already.
		return remote{}, errors.New(strings.TrimPrefix(err.Error(), source+": "))
	}
	if ref.Path == "" {
		return remote{}, notFile
	}
	explicitRev := ref.Revision != ""
	if !explicitRev {
		ref.Revision = "main"
	}
	rem, err := hubRemote(source, endpoint, ref.Repo, ref.Revision, ref.Path)
	if err != nil {
		return remote{}, err
	}
	if first, rest, ok := strings.Cut(ref.Path, "/"); ok && explicitRev && !strings.HasPrefix(ref.Revision, "refs/") {
		rem.slashHint = "hf:" + ref.Repo + "@" + url.PathEscape(ref.Revision+"/"+first) + "/" + rest
	}
	return rem, nil
}

// hubRemote is the remote of the file at p in repo at rev, fetched from
// the hub at endpoint.
func hubRemote(source, endpoint, repo, rev, p string) (remote, error) {
	base, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return remote{}, fmt.Errorf("hub endpoint %q (HF_ENDPOINT) is not an http(s) URL", endpoint)
	}
	file := strings.Split(p, "/")
	for i, seg := range file {
		file[i] = url.PathEscape(seg)
	}
	org, name, _ := strings.Cut(repo, "/")
	// The revision is one path segment with its slashes escaped, refs/pr/1
	// as refs%2Fpr%2F1: what huggingface_hub's hf_hub_url sends
	// (quote(revision, safe="")), while the file's slashes stay slashes.
	u := base.String() + "/" + url.PathEscape(org) + "/" + url.PathEscape(name) +
		"/resolve/" + url.PathEscape(rev) + "/" + strings.Join(file, "/")
	return remote{source: source, url: u, hf: true, hubHost: base.Host}, nil
}

// StripCredentials reports whether a redirect from one URL to another must
// lose the Authorization header (weights/hub's Hub client applies it too): on any change of scheme, host or port, as
// huggingface_hub does (through requests' rebuild_auth). Go's client keeps
// it for a subdomain and for another port of the same host, which for the
// hub (huggingface.co redirecting to cdn-lfs.huggingface.co) would hand
// the user's token to the storage backend.
func StripCredentials(from, to *url.URL) bool {
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

// hubCommit is the commit the hub said it served (X-Repo-Commit), on its
// own response before any redirect to storage; "" when it said none.
func hubCommit(resp *http.Response) string {
	for r := resp; r != nil; {
		if c := r.Header.Get("X-Repo-Commit"); c != "" {
			return c
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	return ""
}

// hubErrorCode is the hub's own code for a refusal (X-Error-Code:
// GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound), on its own
// response before any redirect.
func hubErrorCode(resp *http.Response) string {
	return HeaderText(resp.Header.Get("X-Error-Code"), 64)
}

// hubErrorMessage is the hub's code and words for a refusal, "" when it
// gave none.
func hubErrorMessage(resp *http.Response) string {
	code, msg := hubErrorCode(resp), HeaderText(resp.Header.Get("X-Error-Message"), 300)
	switch {
	case code != "" && msg != "":
		return code + ": " + msg
	case code != "":
		return code
	}
	return msg
}

// HeaderText keeps a header value from the network one printable line of
// at most n bytes, fit for a message or a log line.
func HeaderText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
	}
	return s
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
	// Header values may hold any byte but control characters; keep it
	// one printable line of bounded length.
	return HeaderText(strings.Join(parts, ", "), maxOrigin)
}

// hintFor adds what a person can do about a status, for the common ones.
// For the hub it says which setting gives the node its token: the
// Prolog and the agent run without the admin's $HOME, so
// huggingface-cli login's file is not what they read.
func hintFor(rem remote, code int, tokenSent bool, hubCode string) string {
	switch {
	case rem.hf && hubCode == "RepoNotFound":
		return "; check the repository id; a private repository needs a token the node sends (hf_token_file in agent.toml, or HF_TOKEN in the agent's environment)"
	case rem.hf && (code == http.StatusUnauthorized || code == http.StatusForbidden) && !tokenSent:
		return "; the repository is gated or private and this node sent no token: accept its terms on the Hub with an account that may read it, " +
			"and give that account's token to the node (hf_token_file in agent.toml, or HF_TOKEN in the agent's environment)"
	case rem.hf && (code == http.StatusUnauthorized || code == http.StatusForbidden):
		return "; the repository is gated or private and the Hub refused the token this node sent (hf_token_file in agent.toml, or HF_TOKEN): " +
			"its account must have accepted the repository's terms on the Hub, and a fine-grained token must be allowed to read it"
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
