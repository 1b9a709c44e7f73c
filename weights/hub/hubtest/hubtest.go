// Package hubtest is a stand-in for the Hugging Face Hub on 127.0.0.1, for
// tests of llmgw and of huggingface_hub itself against the same server: it
// answers what both ask (huggingface_hub 1.x's snapshot_download and
// hf_hub_download, read from its source), and misbehaves on demand.
//
//	GET  /api/models/ORG/NAME[/revision/REV]   {"id", "sha", "siblings"}: the commit REV stands for
//	GET  /api/models/ORG/NAME/tree/REV[/PATH]?recursive=true
//	                                          files with size, git blob id (oid) and, for LFS
//	                                          files, {"oid": sha256, "size"}; paged by a Link header
//	HEAD|GET /ORG/NAME/resolve/REV/PATH        small files: 200, ETag "<blob id>", X-Repo-Commit;
//	                                          LFS files: 302 to the CDN (another port), with
//	                                          X-Repo-Commit, X-Linked-Etag "<sha256>", X-Linked-Size
//	HEAD|GET CDN/blobs/SHA256?sig=…           the bytes, with ranges (what a storage backend does)
//
// A branch can be moved at any moment (Move, or OnResolve to move it while
// a fetch is under way), a repository gated (Gate: 401 without a token,
// 403 with another, with the Hub's X-Error-Code GatedRepo), the next
// requests refused with 429 and Retry-After (Limit), and the CDN slowed
// (Throttle). It counts what it served, so a test can say how many bytes
// a fetch cost the origin.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Hub is the stand-in. Create it with Start.
type Hub struct {
	// URL is the Hub's base URL (HF_ENDPOINT); CDN the storage backend's,
	// on another port, where LFS files are redirected.
	URL, CDN string
	// PageSize is how many files one tree page lists (default 50), so that
	// paging is exercised by any repository of more.
	PageSize int

	hub, cdn *http.Server
	mu       sync.Mutex
	repos    map[string]*repo // by lower-case id
	blobs    map[string]*blob // LFS blobs by sha256, as the CDN serves them
	limit    int              // requests still to answer 429
	retry    string           // their Retry-After
	rate     int64            // CDN bytes per second, 0: unthrottled
	onRes    func(repo, rev, file string)
	log      []string

	served atomic.Int64 // bytes of file contents served, Hub and CDN
	perBlb sync.Map     // blob name → *atomic.Int64 bytes served
	perCli sync.Map     // client address (no port) → *atomic.Int64 bytes served
	commit atomic.Int64
}

type repo struct {
	id       string
	commits  map[string]map[string]*blob // commit → path → file
	branches map[string]string
	token    string // gated: the token that may read it
}

type blob struct {
	data   []byte
	lfs    bool
	sha256 string
	id     string // git blob id (of the pointer, for an LFS file)
}

// name is the blob's name in a Hugging Face cache: its ETag.
func (b *blob) name() string {
	if b.lfs {
		return b.sha256
	}
	return b.id
}

// Start serves a new, empty Hub and its CDN on 127.0.0.1.
func Start() (*Hub, error) { return StartOn("127.0.0.1") }

// StartOn serves a new, empty Hub and its CDN on host (an address of a
// network namespace a benchmark made), each on a port of its own.
func StartOn(host string) (*Hub, error) {
	h := &Hub{PageSize: 50, repos: map[string]*repo{}, blobs: map[string]*blob{}}
	hl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	cl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		hl.Close()
		return nil, err
	}
	h.URL, h.CDN = "http://"+hl.Addr().String(), "http://"+cl.Addr().String()
	h.hub = &http.Server{Handler: http.HandlerFunc(h.serveHub), ReadHeaderTimeout: 10 * time.Second}
	h.cdn = &http.Server{Handler: http.HandlerFunc(h.serveCDN), ReadHeaderTimeout: 10 * time.Second}
	go h.hub.Serve(hl)
	go h.cdn.Serve(cl)
	return h, nil
}

// Close stops both servers.
func (h *Hub) Close() {
	h.hub.Close()
	h.cdn.Close()
}

// IsLFS is how the stand-in stores a file, as the Hub's default
// .gitattributes does: weights and anything over 10 MB in LFS, the rest in
// git.
func IsLFS(p string, size int) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".msgpack", ".h5":
		return true
	}
	return size > 10<<20
}

// Commit makes a new commit of repo holding exactly files (path → bytes),
// moves branch to it (creating the repository and the branch as needed),
// and returns the commit.
func (h *Hub) Commit(repoID, branch string, files map[string][]byte) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[strings.ToLower(repoID)]
	if r == nil {
		r = &repo{id: repoID, commits: map[string]map[string]*blob{}, branches: map[string]string{}}
		h.repos[strings.ToLower(repoID)] = r
	}
	tree := map[string]*blob{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	id := sha1.New()
	fmt.Fprintf(id, "%s %d", repoID, h.commit.Add(1))
	for _, p := range paths {
		data := files[p]
		b := &blob{data: data, lfs: IsLFS(p, len(data))}
		sum := sha256.Sum256(data)
		b.sha256 = hex.EncodeToString(sum[:])
		if b.lfs {
			// The git blob of an LFS file is its pointer.
			b.id = gitBlobID([]byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", b.sha256, len(data))))
			h.blobs[b.sha256] = b
		} else {
			b.id = gitBlobID(data)
		}
		tree[p] = b
		fmt.Fprintf(id, " %s %s", p, b.id)
	}
	c := hex.EncodeToString(id.Sum(nil))
	r.commits[c] = tree
	r.branches[branch] = c
	return c
}

// CommitDir is Commit of every regular file under dir (paths relative to
// it, '/'-separated): a model saved by transformers' save_pretrained.
func (h *Hub) CommitDir(repoID, branch, dir string) (string, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return "", err
	}
	return h.Commit(repoID, branch, files), nil
}

// Files returns a copy of the files of repo at commit.
func (h *Hub) Files(repoID, commit string) map[string][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]byte{}
	if r := h.repos[strings.ToLower(repoID)]; r != nil {
		for p, b := range r.commits[commit] {
			out[p] = bytes.Clone(b.data)
		}
	}
	return out
}

// Move points branch of repo at commit, as a push would.
func (h *Hub) Move(repoID, branch, commit string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repos[strings.ToLower(repoID)].branches[branch] = commit
}

// Branch returns the commit branch of repo points at.
func (h *Hub) Branch(repoID, branch string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repos[strings.ToLower(repoID)].branches[branch]
}

// Gate makes repo readable only with token: 401 without one, 403 with
// another, as the Hub answers for a gated repository.
func (h *Hub) Gate(repoID, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repos[strings.ToLower(repoID)].token = token
}

// Limit answers the next n requests to the Hub (not the CDN) with 429 and
// Retry-After: retryAfter seconds.
func (h *Hub) Limit(n, retryAfter int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.limit, h.retry = n, strconv.Itoa(retryAfter)
}

// Throttle limits the CDN to bytesPerSecond per response (0: none).
func (h *Hub) Throttle(bytesPerSecond int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rate = bytesPerSecond
}

// OnResolve calls fn before each resolve request is answered, with the
// repository, the revision as asked and the file: a test moves a branch
// there to have it move in the middle of a fetch.
func (h *Hub) OnResolve(fn func(repo, rev, file string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onRes = fn
}

// Served is how many bytes of file contents the Hub and its CDN served.
func (h *Hub) Served() int64 { return h.served.Load() }

// ServedOf is how many bytes of the blob named name (its sha256 or git
// blob id) were served.
func (h *Hub) ServedOf(name string) int64 {
	if v, ok := h.perBlb.Load(name); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Requests returns "METHOD PATH" of every request the Hub (not the CDN)
// answered, in order.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...)
}

// BlobName is the name the file at p of repo at commit has in a
// Hugging Face cache ("" when there is no such file).
func (h *Hub) BlobName(repoID, commit, p string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.repos[strings.ToLower(repoID)]; r != nil {
		if b := r.commits[commit][p]; b != nil {
			return b.name()
		}
	}
	return ""
}

// ServedTo is how many bytes of file contents each client address (a
// node's, as it connects) was served.
func (h *Hub) ServedTo() map[string]int64 {
	out := map[string]int64{}
	h.perCli.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (h *Hub) count(name, client string, n int64) {
	h.served.Add(n)
	v, _ := h.perBlb.LoadOrStore(name, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
	v, _ = h.perCli.LoadOrStore(client, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

func hubError(w http.ResponseWriter, code int, errCode, msg string) {
	if errCode != "" {
		w.Header().Set("X-Error-Code", errCode)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// serveHub answers the API and resolve requests.
func (h *Hub) serveHub(w http.ResponseWriter, req *http.Request) {
	h.mu.Lock()
	h.log = append(h.log, req.Method+" "+req.URL.RequestURI())
	limited := h.limit > 0
	if limited {
		h.limit--
	}
	retry := h.retry
	h.mu.Unlock()
	if limited {
		w.Header().Set("Retry-After", retry)
		hubError(w, http.StatusTooManyRequests, "", "You have been rate-limited; retry later.")
		return
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
	if len(parts) >= 3 && parts[0] == "api" && parts[1] == "models" {
		h.serveAPI(w, req, parts[2:])
		return
	}
	if len(parts) >= 5 && parts[2] == "resolve" {
		h.serveResolve(w, req, parts)
		return
	}
	hubError(w, http.StatusNotFound, "", "no such endpoint in the stand-in: "+req.URL.Path)
}

// lookup finds a repository and checks the request's token against it.
func (h *Hub) lookup(w http.ResponseWriter, req *http.Request, org, name string) *repo {
	id := unescape(org) + "/" + unescape(name)
	h.mu.Lock()
	r := h.repos[strings.ToLower(id)]
	h.mu.Unlock()
	if r == nil {
		// The Hub says 401 for a repository it will not admit exists.
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+req.URL.String()+". Please make sure you specified the correct `repo_id` and `repo_type`.")
		return nil
	}
	if r.token != "" {
		auth := req.Header.Get("Authorization")
		switch {
		case auth == "":
			hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+r.id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return nil
		case auth != "Bearer "+r.token:
			hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+r.id+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+r.id+" to ask for access.")
			return nil
		}
	}
	return r
}

// commitOf is the commit rev stands for in r: a branch, or a commit.
func (h *Hub) commitOf(r *repo, rev string) (string, map[string]*blob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := rev
	if b, ok := r.branches[rev]; ok {
		c = b
	}
	return c, r.commits[c]
}

func (h *Hub) serveAPI(w http.ResponseWriter, req *http.Request, parts []string) {
	if len(parts) < 2 {
		hubError(w, http.StatusNotFound, "", "want /api/models/ORG/NAME")
		return
	}
	r := h.lookup(w, req, parts[0], parts[1])
	if r == nil {
		return
	}
	rest := parts[2:]
	switch {
	case len(rest) == 0 || len(rest) == 2 && rest[0] == "revision":
		rev := "main"
		if len(rest) == 2 {
			rev = unescape(rest[1])
		}
		commit, tree := h.commitOf(r, rev)
		if tree == nil {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
			return
		}
		sib := []map[string]string{}
		for _, p := range sortedPaths(tree) {
			sib = append(sib, map[string]string{"rfilename": p})
		}
		gated := any(false)
		if r.token != "" {
			gated = "manual"
		}
		writeJSON(w, map[string]any{"_id": "x", "id": r.id, "modelId": r.id, "sha": commit, "private": false, "gated": gated,
			"disabled": false, "lastModified": "2026-01-01T00:00:00.000Z", "siblings": sib, "tags": []string{}})
	case len(rest) >= 2 && rest[0] == "tree":
		h.serveTree(w, req, r, unescape(rest[1]), unescape(strings.Join(rest[2:], "/")))
	default:
		hubError(w, http.StatusNotFound, "", "the stand-in answers /revision/REV and /tree/REV")
	}
}

func (h *Hub) serveTree(w http.ResponseWriter, req *http.Request, r *repo, rev, under string) {
	commit, tree := h.commitOf(r, rev)
	if tree == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	recursive := req.URL.Query().Get("recursive") == "true" || req.URL.Query().Get("recursive") == "True"
	type lfs struct {
		OID         string `json:"oid"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string `json:"type"`
		OID  string `json:"oid"`
		Size int    `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	var all []entry
	dirs := map[string]bool{}
	prefix := ""
	if under != "" {
		prefix = under + "/"
	}
	for _, p := range sortedPaths(tree) {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		rel := strings.TrimPrefix(p, prefix)
		if !recursive && strings.Contains(rel, "/") {
			d := prefix + rel[:strings.IndexByte(rel, '/')]
			if !dirs[d] {
				dirs[d] = true
				all = append(all, entry{Type: "directory", OID: strings.Repeat("0", 40), Path: d})
			}
			continue
		}
		if recursive {
			for d := path.Dir(p); d != "." && strings.HasPrefix(d+"/", prefix) && d+"/" != prefix; d = path.Dir(d) {
				if !dirs[d] {
					dirs[d] = true
					all = append(all, entry{Type: "directory", OID: strings.Repeat("0", 40), Path: d})
				}
			}
		}
		b := tree[p]
		e := entry{Type: "file", OID: b.id, Size: len(b.data), Path: p}
		if b.lfs {
			e.LFS = &lfs{OID: b.sha256, Size: len(b.data), PointerSize: 134}
		}
		all = append(all, e)
	}
	page := h.PageSize
	if page <= 0 {
		page = 50
	}
	start, _ := strconv.Atoi(req.URL.Query().Get("cursor"))
	start = max(0, min(start, len(all)))
	end := min(start+page, len(all))
	if end < len(all) {
		q := req.URL.Query()
		q.Set("cursor", strconv.Itoa(end))
		next := *req.URL
		next.RawQuery = q.Encode()
		next.Scheme, next.Host = "http", req.Host
		w.Header().Set("Link", "<"+next.String()+`>; rel="next"`)
	}
	w.Header().Set("X-Repo-Commit", commit)
	writeJSON(w, all[start:end])
}

func (h *Hub) serveResolve(w http.ResponseWriter, req *http.Request, parts []string) {
	r := h.lookup(w, req, parts[0], parts[1])
	if r == nil {
		return
	}
	rev := unescape(parts[3])
	file := unescape(strings.Join(parts[4:], "/"))
	h.mu.Lock()
	fn := h.onRes
	h.mu.Unlock()
	if fn != nil {
		fn(r.id, rev, file)
	}
	commit, tree := h.commitOf(r, rev)
	if tree == nil {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	b := tree[file]
	if b == nil {
		w.Header().Set("X-Repo-Commit", commit)
		hubError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if b.lfs {
		w.Header().Set("X-Linked-Etag", `"`+b.sha256+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(b.data)))
		w.Header().Set("ETag", `"`+b.id+`"`)
		w.Header().Set("Location", h.CDN+"/blobs/"+b.sha256+"?sig="+commit[:8])
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+b.id+`"`)
	h.serveBytes(w, req, b, b.id, 0)
}

// serveCDN serves LFS blobs by sha256, with ranges.
func (h *Hub) serveCDN(w http.ResponseWriter, req *http.Request) {
	name, ok := strings.CutPrefix(req.URL.Path, "/blobs/")
	h.mu.Lock()
	b := h.blobs[name]
	rate := h.rate
	h.mu.Unlock()
	if !ok || b == nil {
		http.Error(w, "no such blob", http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", `"`+b.sha256+`"`)
	h.serveBytes(w, req, b, b.sha256, rate)
}

// serveBytes answers with b's bytes (ranges, If-Range), counting what it
// sends, at rate bytes a second when rate > 0.
func (h *Hub) serveBytes(w http.ResponseWriter, req *http.Request, b *blob, name string, rate int64) {
	client, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		client = req.RemoteAddr
	}
	cw := &countingWriter{ResponseWriter: w, h: h, name: name, client: client, rate: rate, start: time.Now()}
	http.ServeContent(cw, req, "", time.Time{}, bytes.NewReader(b.data))
}

type countingWriter struct {
	http.ResponseWriter
	h      *Hub
	name   string
	client string
	rate   int64
	start  time.Time
	n      int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p
		if c.rate > 0 {
			chunk = p[:min(len(p), int(max(c.rate/20, 1)))]
			due := c.start.Add(time.Duration(float64(c.n) / float64(c.rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		n, err := c.ResponseWriter.Write(chunk)
		c.n += int64(n)
		written += n
		c.h.count(c.name, c.client, int64(n))
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func sortedPaths(tree map[string]*blob) []string {
	out := make([]string, 0, len(tree))
	for p := range tree {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func unescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
