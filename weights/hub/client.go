// Package hub reads a Hugging Face repository's revision through the Hub's
// API: the commit a branch or tag stands for, the files at that commit
// with their sizes and the digests the Hub publishes for them, and the
// selection of them an engine loads. `llmgw models add NAME hf:ORG/NAME`
// and `llmgw models repin` resolve a model with it, once, on the admin's
// machine; the nodes then fetch exactly those files at that commit
// (weights/fetch), and never ask the Hub what a branch means again.
//
// It asks what huggingface_hub asks, so a site's mirror that serves one
// serves the other (HF_ENDPOINT): GET /api/models/REPO/revision/REV for
// the commit, and GET /api/models/REPO/tree/COMMIT?recursive=true for the
// files, following the Link header's next pages.
package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// DefaultEndpoint is the public Hub; HF_ENDPOINT names a mirror instead,
// for llmgw as for huggingface_hub, vLLM and SGLang.
const DefaultEndpoint = "https://huggingface.co"

// Defaults of a Client.
const (
	// DefaultRetries is how often one request is asked again after a
	// 429, a 5xx or a network error.
	DefaultRetries = 5
	// DefaultRetryWait is the first pause before a retry when the Hub
	// says none (Retry-After); it doubles, up to maxRetryWait.
	DefaultRetryWait = time.Second
	maxRetryWait     = 30 * time.Second
	// maxRetryAfter is the longest Retry-After waited out: longer, and the
	// admin is told to come back later rather than left at a silent prompt.
	maxRetryAfter = 2 * time.Minute
	// maxAPIBody bounds one API answer: a tree page of a thousand files is
	// a few hundred kilobytes.
	maxAPIBody = 32 << 20
	// maxTreeEntries bounds a listing, counting its directories too: a
	// repository of more entries than this is not a model, and a listing
	// that never ends (a broken or hostile mirror) ends here.
	maxTreeEntries = 100000
)

// Client asks one Hub. The zero value asks DefaultEndpoint (or
// $HF_ENDPOINT) without a token.
type Client struct {
	// Endpoint is the Hub's base URL (default $HF_ENDPOINT, else
	// DefaultEndpoint).
	Endpoint string
	// Token is sent as a bearer token to the Endpoint's scheme, host and
	// port only: never across a redirect to another (the Hub's CDN).
	Token string
	// HTTP makes the requests (default: one with a 30 s wait for headers).
	HTTP *http.Client
	// Retries and RetryWait: see DefaultRetries, DefaultRetryWait.
	// Negative Retries retries nothing.
	Retries   int
	RetryWait time.Duration
	// UserAgent is sent with every request.
	UserAgent string
	// Sleep waits between retries (tests make it instant).
	Sleep func(ctx context.Context, d time.Duration) error
	// Waiting, when set, is told each wait before a retry, in words, so
	// that a person at the command line is not left at a silent prompt
	// through minutes of Retry-After.
	Waiting func(msg string)
}

// File is one file of a repository at one commit, as the tree lists it.
type File struct {
	Path string
	Size int64
	// BlobID is the file's git blob id; for an LFS file, the pointer's.
	BlobID string
	// LFS is an LFS file's sha256, "" for a file stored in git.
	LFS string
}

// Hub is f as a catalog entry lists it: by its LFS sha256, or by its git
// blob id when it is stored in git.
func (f File) Hub() catalog.HubFile {
	if f.LFS != "" {
		return catalog.HubFile{Path: f.Path, Size: f.Size, SHA256: f.LFS}
	}
	return catalog.HubFile{Path: f.Path, Size: f.Size, Blob: f.BlobID}
}

// Revision is a repository at one commit: what a revision resolved to.
type Revision struct {
	// Repo is the repository's id as the Hub spells it (it answers for a
	// renamed repository, and in another case, under the id it has now).
	Repo string
	// Revision is what was asked; Commit what it stands for.
	Revision string
	Commit   string
	// Files are every file at Commit, in the Hub's order.
	Files []File
}

// Error is a Hub answer that is not what was asked for, said in words:
// what was asked, what the Hub answered, and what to do about it.
type Error struct {
	Op     string // what was asked: "revision main of org/name"
	Status int    // the HTTP status; 0 for a network error
	// Code and Message are the Hub's own X-Error-Code and X-Error-Message
	// (GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound).
	Code, Message string
	Hint          string
	Err           error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		fmt.Fprintf(&b, "the Hub answered %d %s", e.Status, http.StatusText(e.Status))
		if e.Code != "" {
			b.WriteString(" (" + e.Code + ")")
		}
		if e.Message != "" {
			b.WriteString(": " + e.Message)
		}
	}
	b.WriteString(e.Hint)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// NotFound reports whether err is the Hub saying the repository, the
// revision or the file is not there.
func NotFound(err error) bool {
	var he *Error
	return errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Code == "RepoNotFound" || he.Code == "RevisionNotFound" || he.Code == "EntryNotFound")
}

func (c *Client) endpoint() string {
	e := c.Endpoint
	if e == "" {
		e = os.Getenv("HF_ENDPOINT")
	}
	if e == "" {
		e = DefaultEndpoint
	}
	return strings.TrimRight(e, "/")
}

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}}
}

// TokenFromEnv is the Hub token as huggingface_hub finds it: $HF_TOKEN,
// else the file $HF_TOKEN_PATH names, else $HF_HOME/token (HF_HOME
// defaulting to $XDG_CACHE_HOME/huggingface, then ~/.cache/huggingface),
// which `huggingface-cli login` writes. "" when there is none.
func TokenFromEnv(getenv func(string) string) string {
	if t := strings.TrimSpace(getenv("HF_TOKEN")); t != "" {
		return t
	}
	p := getenv("HF_TOKEN_PATH")
	if p == "" {
		home := getenv("HF_HOME")
		if home == "" {
			cache := getenv("XDG_CACHE_HOME")
			if cache == "" {
				h := getenv("HOME")
				if h == "" {
					return ""
				}
				cache = filepath.Join(h, ".cache")
			}
			home = filepath.Join(cache, "huggingface")
		}
		p = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Resolve asks the Hub which commit rev of repo stands for, and lists
// every file at that commit. The listing is of the commit, never of the
// branch: a branch that moves while the pages are read cannot mix two
// commits into one answer.
func (c *Client) Resolve(ctx context.Context, repo, rev string) (Revision, error) {
	if err := catalog.ValidRepoID(repo); err != nil {
		return Revision{}, err
	}
	if rev == "" {
		rev = "main"
	}
	if err := catalog.ValidRevision(rev); err != nil {
		return Revision{}, err
	}
	op := fmt.Sprintf("revision %s of %s", rev, repo)
	var info struct {
		ID  string `json:"id"`
		SHA string `json:"sha"`
	}
	u := c.endpoint() + "/api/models/" + repoPath(repo) + "/revision/" + url.PathEscape(rev)
	if _, err := c.getJSON(ctx, op, u, &info); err != nil {
		return Revision{}, err
	}
	if !catalog.ValidCommit(info.SHA) {
		return Revision{}, &Error{Op: op, Err: fmt.Errorf("the Hub named commit %q, not 40 lowercase hex digits", info.SHA)}
	}
	out := Revision{Repo: repo, Revision: rev, Commit: info.SHA}
	if info.ID != "" && !strings.EqualFold(info.ID, repo) {
		return Revision{}, &Error{Op: op, Err: fmt.Errorf("the Hub answered for repository %q; ask for that one", info.ID)}
	}
	if info.ID != "" && catalog.ValidRepoID(info.ID) == nil {
		out.Repo = info.ID
	}
	files, err := c.Tree(ctx, out.Repo, out.Commit)
	if err != nil {
		return Revision{}, err
	}
	out.Files = files
	return out, nil
}

// treeEntry is one entry of the tree API's answer.
type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// Tree lists every file of repo at commit, following the pages the Hub
// links to. Each path is checked (catalog.CheckRepoPath) and each digest
// must have its shape: the answer names files a node will write.
func (c *Client) Tree(ctx context.Context, repo, commit string) ([]File, error) {
	op := fmt.Sprintf("files of %s at %s", repo, commit)
	next := c.endpoint() + "/api/models/" + repoPath(repo) + "/tree/" + url.PathEscape(commit) + "?recursive=true&expand=false"
	base, _ := url.Parse(next)
	var files []File
	seen := map[string]bool{}
	entries := 0
	for pages := 0; next != ""; pages++ {
		if pages > 10000 {
			return nil, &Error{Op: op, Err: errors.New("more than 10000 pages; the Hub's Link header goes round in circles")}
		}
		var page []treeEntry
		resp, err := c.getJSON(ctx, op, next, &page)
		if err != nil {
			return nil, err
		}
		if entries += len(page); entries > maxTreeEntries {
			return nil, &Error{Op: op, Err: fmt.Errorf("more than %d entries; not a model repository (or a listing that does not end: is HF_ENDPOINT %s a Hub?)", maxTreeEntries, c.endpoint())}
		}
		for _, e := range page {
			if e.Type != "file" {
				continue
			}
			f, err := fileOf(e)
			if err != nil {
				return nil, &Error{Op: op, Err: err}
			}
			if seen[f.Path] {
				return nil, &Error{Op: op, Err: fmt.Errorf("the Hub listed %s twice", f.Path)}
			}
			seen[f.Path] = true
			files = append(files, f)
		}
		next = nextPage(resp.Header, base)
	}
	return files, nil
}

func fileOf(e treeEntry) (File, error) {
	if err := catalog.CheckRepoPath(e.Path); err != nil {
		return File{}, fmt.Errorf("the Hub listed a file this node cannot store: %w", err)
	}
	f := File{Path: e.Path, Size: e.Size, BlobID: e.OID}
	if !catalog.ValidCommit(e.OID) {
		return File{}, fmt.Errorf("the Hub listed %s with git blob id %q, not 40 lowercase hex digits", e.Path, e.OID)
	}
	if e.LFS != nil {
		f.LFS = strings.ToLower(e.LFS.OID)
		if !catalog.ValidSHA256(f.LFS) {
			return File{}, fmt.Errorf("the Hub listed LFS file %s with sha256 %q, not 64 hex digits", e.Path, e.LFS.OID)
		}
		// The entry's size is the file's; the Hub gives the LFS object's
		// beside it, which is the same.
		if e.LFS.Size > 0 {
			f.Size = e.LFS.Size
		}
	}
	if f.Size < 0 {
		return File{}, fmt.Errorf("the Hub listed %s with size %d", e.Path, f.Size)
	}
	return f, nil
}

// nextPage is the Link header's rel="next" URL, resolved against base,
// and only when it stays on the Hub: a page is fetched with the token.
func nextPage(h http.Header, base *url.URL) string {
	for _, link := range h.Values("Link") {
		for _, part := range strings.Split(link, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.TrimSpace(k) == "rel" && strings.Trim(strings.TrimSpace(v), `"`) == "next" {
					u, err := base.Parse(strings.Trim(target, "<>"))
					if err != nil || u.Scheme != base.Scheme || u.Host != base.Host {
						return ""
					}
					return u.String()
				}
			}
		}
	}
	return ""
}

// ReadFile fetches the file f of repo at commit, whole, and checks it
// against the listing: its size, and its digest (the sha256 of an LFS
// file, the git blob id of another), and that the Hub served that commit.
// It is for the small files a selection needs to read (the index that
// names the shards), bounded by limit.
func (c *Client) ReadFile(ctx context.Context, repo, commit string, f File, limit int64) ([]byte, error) {
	op := fmt.Sprintf("%s of %s at %s", f.Path, repo, commit)
	if f.Size > limit {
		return nil, &Error{Op: op, Err: fmt.Errorf("%d bytes, more than the %d read to choose the files", f.Size, limit)}
	}
	u := c.endpoint() + "/" + repoPath(repo) + "/resolve/" + url.PathEscape(commit) + "/" + pathEscape(f.Path)
	resp, err := c.do(ctx, op, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if got := repoCommit(resp); got != "" && got != commit {
		return nil, &Error{Op: op, Err: fmt.Errorf("the Hub served commit %s", got)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	if int64(len(b)) != f.Size {
		return nil, &Error{Op: op, Err: fmt.Errorf("got %d bytes, the listing says %d", len(b), f.Size)}
	}
	if err := catalog.CheckHubDigest(f.Hub(), b); err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	return b, nil
}

// repoCommit is the commit the Hub said it served, on its own answer or
// on the redirect that led to the answer (the CDN adds none).
func repoCommit(resp *http.Response) string {
	for r := resp; r != nil; {
		if v := r.Header.Get("X-Repo-Commit"); v != "" {
			return v
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	return ""
}

// getJSON GETs u and decodes its JSON answer into out.
func (c *Client) getJSON(ctx context.Context, op, u string, out any) (*http.Response, error) {
	resp, err := c.do(ctx, op, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBody)).Decode(out); err != nil {
		return nil, &Error{Op: op, Err: fmt.Errorf("the Hub's answer is not the JSON expected (is HF_ENDPOINT %s a Hub?): %w", c.endpoint(), err)}
	}
	return resp, nil
}

// do GETs u, retrying a 429, a 5xx and a network error, and returns a 2xx
// answer; any other is an *Error that says what to do.
func (c *Client) do(ctx context.Context, op, u string) (*http.Response, error) {
	retries := c.Retries
	switch {
	case retries == 0:
		retries = DefaultRetries
	case retries < 0:
		retries = 0
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, u)
		if err == nil && resp.StatusCode/100 == 2 {
			return resp, nil
		}
		var herr *Error
		var wait time.Duration
		retry := false
		if err != nil {
			herr = &Error{Op: op, Err: err}
			retry = ctx.Err() == nil
		} else {
			herr = c.statusError(op, resp)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			retry = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
			wait = fetch.ParseRetryAfter(resp.Header.Get("Retry-After"))
		}
		if !retry || attempt >= retries {
			if herr.Status == http.StatusTooManyRequests {
				herr.Hint = fmt.Sprintf("; the Hub still limited the rate after %d attempts: try again in a few minutes, or give a token (HF_TOKEN), whose limits are higher", attempt+1)
			}
			return nil, herr
		}
		if wait > maxRetryAfter {
			herr.Hint = fmt.Sprintf("; the Hub asks to wait %s (Retry-After): try again then", wait.Round(time.Second))
			return nil, herr
		}
		if wait <= 0 {
			wait = min(positive(c.RetryWait, DefaultRetryWait)<<min(attempt, 16), maxRetryWait)
		}
		if c.Waiting != nil {
			c.Waiting(fmt.Sprintf("%s; waiting %s before attempt %d of %d", strings.TrimRight(herr.Error(), "."), wait.Round(time.Second), attempt+2, retries+1))
		}
		if err := c.sleep(ctx, wait); err != nil {
			return nil, &Error{Op: op, Err: err}
		}
	}
}

func (c *Client) once(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	req.Header.Set("Accept-Encoding", "identity")
	hubURL, _ := url.Parse(c.endpoint())
	if c.Token != "" && hubURL != nil && !fetch.StripCredentials(hubURL, req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := *c.client()
	policy := hc.CheckRedirect
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		// The token stays with the Hub: a redirect to its CDN (or any
		// other scheme, host or port) loses it, as with huggingface_hub.
		if fetch.StripCredentials(via[0].URL, req.URL) {
			req.Header.Del("Authorization")
		}
		if policy != nil {
			return policy(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %w", redact(u), err)
	}
	return resp, nil
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// statusError says what a non-2xx answer means, with the Hub's own code
// and message, and what the admin can do.
func (c *Client) statusError(op string, resp *http.Response) *Error {
	e := &Error{Op: op, Status: resp.StatusCode, Code: fetch.HeaderText(resp.Header.Get("X-Error-Code"), 64), Message: fetch.HeaderText(resp.Header.Get("X-Error-Message"), 300)}
	switch {
	case e.Code == "RepoNotFound":
		e.Hint = "; check the repository id (ORG/NAME as the Hub spells it); a private repository needs a token that may read it (HF_TOKEN)"
	case e.Code == "GatedRepo" || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if c.Token == "" {
			e.Hint = "; the repository is gated or private, and no token was sent: accept its terms on the Hub with an account that may read it, " +
				"then give that account's token (HF_TOKEN, or the file huggingface-cli login writes)"
		} else {
			e.Hint = "; the repository is gated or private, and the token sent (HF_TOKEN, or huggingface-cli login's file) was refused: " +
				"the token's account must have accepted the repository's terms on the Hub, and a fine-grained token must be allowed to read it"
		}
	case e.Code == "RevisionNotFound":
		e.Hint = "; check the branch, tag or commit after @"
	case resp.StatusCode == http.StatusNotFound:
		e.Hint = "; check the repository id (ORG/NAME as the Hub spells it) and the revision"
	}
	return e
}

func positive(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// redact drops a URL's query, where a CDN's signature would be.
func redact(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		return u[:i]
	}
	return u
}

// repoPath is repo's two parts, each escaped, joined by a slash.
func repoPath(repo string) string { return pathEscape(repo) }

// pathEscape escapes each part of a '/'-separated path.
func pathEscape(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
