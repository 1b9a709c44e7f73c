package catalog

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// A model may be a Hugging Face repository at one commit (Model.Hub): the
// files an engine loads from it (the selection), listed once through the
// Hub's API when the model was added, each with its size and the digest
// the Hub publishes for it. Every node fetches those files at that commit,
// never at a branch, into the layout huggingface_hub itself writes, so an
// engine started with HF_HUB_CACHE and HF_HUB_OFFLINE=1 finds them by the
// repository id the user already types:
//
//	<hf_cache>/models--ORG--NAME/
//	    blobs/<sha256 of an LFS file, or the git blob id of a small one>
//	    snapshots/<commit>/<path>     relative symlinks into blobs/ (subfolders kept)
//	    refs/main                     the commit (and refs/<revision> for another branch or tag)
//
// Blobs are named by their content, so they are shared between revisions
// (a new revision fetches only the files that changed) and never change
// once written; a snapshot directory is one commit's, so a new revision is
// a new directory and a running job's snapshot is never changed under it.
//
// The model's Source is HubSource(repo, commit), "hf:ORG/NAME@COMMIT": two
// entries cannot hold one commit of one repository (a source is one
// model), and an agent or hook older than Hub models reads the entry as
// one hf: source naming a repository, which its fetcher refuses with
// "names a repository, not a file": the job fails saying so, and nothing
// is fetched where no engine would look.

// Hub is a Model's Hugging Face repository at one commit.
type Hub struct {
	// Repo is the repository's id as the Hub spells it: "org/name".
	Repo string `json:"repo"`
	// Revision is what the admin asked for, a branch, a tag or a commit
	// ("main" by default): what `llmgw models repin` resolves again.
	Revision string `json:"revision"`
	// Commit is the 40-hex-digit commit Revision resolved to.
	Commit string `json:"commit"`
	// Include and Exclude are the admin's globs (`models add --include`,
	// `--exclude`): added to, and taken from, the default selection.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// Listed says the files were named one by one (`models add NAME
	// hf:org/repo/FILE...`): a repin keeps exactly those paths.
	Listed bool `json:"listed,omitempty"`
	// Files are the selection at Commit, in path order.
	Files []HubFile `json:"files"`
}

// HubFile is one file of a Hub model's selection.
type HubFile struct {
	// Path is the file's path in the repository, '/'-separated.
	Path string `json:"path"`
	Size int64  `json:"size_bytes"`
	// SHA256 is an LFS file's sha256, as the Hub publishes it; Blob is a
	// small (non-LFS) file's git blob id, the sha1 of "blob SIZE\0" and
	// its bytes. Exactly one is set, and it names the file's blob.
	SHA256 string `json:"sha256,omitempty"`
	Blob   string `json:"blob,omitempty"`
}

// BlobName is the name of f's blob in the repository's blobs/ directory:
// what huggingface_hub names it (the ETag the Hub gives the file).
func (f HubFile) BlobName() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.Blob
}

// GitBlobID is the git blob id of a file's bytes, as git and the Hub
// compute it: the sha1 of "blob SIZE\0" and the bytes. The Hub names a
// small (non-LFS) file's blob by it.
func GitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// CheckHubDigest says whether b are f's bytes: its sha256 for an LFS
// file, its git blob id for another.
func CheckHubDigest(f HubFile, b []byte) error {
	if f.SHA256 != "" {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
			return fmt.Errorf("sha256 %s, the Hub publishes %s", got, f.SHA256)
		}
		return nil
	}
	if got := GitBlobID(b); got != f.Blob {
		return fmt.Errorf("git blob id %s, the Hub publishes %s", got, f.Blob)
	}
	return nil
}

// IsHub reports whether m is a Hugging Face repository at one commit.
func (m Model) IsHub() bool { return m.Hub != nil }

// MaxHubFiles bounds a Hub model's selection: the largest published
// checkpoints have a few hundred shards, and the entry travels whole in
// the catalog, the node's catalog copy and an ensure request.
const MaxHubFiles = 4096

// MaxHubBytes bounds a Hub model's size, and so each file's: a petabyte,
// a thousand times the largest published checkpoint. A listing that says
// more is wrong, and sizes adding up past int64 would make the model's
// size negative, which every disk check then passes.
const MaxHubBytes = 1 << 50

// HubSource is the Source of the Hub model of repo at commit.
func HubSource(repo, commit string) string { return "hf:" + repo + "@" + commit }

// HubStagingDir is the directory of the llmgw cache where the blobs of a
// Hugging Face cache on another filesystem are fetched before they are
// moved there (weights/fetch/hub.go): not a model, and no cache name.
const HubStagingDir = ".hub-staging"

// DefaultHFDir is the name of the Hugging Face cache inside the llmgw
// cache directory when agent.toml names no hf_cache: huggingface_hub's own
// name for it ($HF_HOME/hub).
const DefaultHFDir = "hub"

// ValidRepoID says why repo cannot be a Hub model repository's id, or
// nil. The Hub's own rules (huggingface_hub's validate_repo_id): letters,
// digits, '-', '_' and '.', one '/' at most, no "--" or "..", neither end
// a '-' or '.', at most 96 characters. "--" matters here besides: the
// cache folder joins the parts with it, and only without it inside the id
// is the folder name read back to the same id.
func ValidRepoID(repo string) error {
	bad := func(why string) error {
		return fmt.Errorf("repository id %q %s; write it as the Hub does, ORG/NAME", repo, why)
	}
	switch {
	case repo == "":
		return errors.New("repository id is empty; write it as the Hub does, ORG/NAME")
	case len(repo) > 96:
		return bad("is longer than the Hub's 96 characters")
	case strings.Count(repo, "/") > 1:
		return bad("has more than one '/'")
	case strings.Contains(repo, "--"), strings.Contains(repo, ".."):
		return bad("holds \"--\" or \"..\", which the Hub does not allow")
	}
	for _, part := range strings.Split(repo, "/") {
		if part == "" || strings.IndexByte("-.", part[0]) >= 0 || strings.IndexByte("-.", part[len(part)-1]) >= 0 {
			return bad("has a part that is empty or begins or ends with '-' or '.'")
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
				return bad("may hold only letters, digits, '-', '_' and '.'")
			}
		}
	}
	return nil
}

// ValidCommit reports whether s is a commit as the Hub gives one: 40
// lowercase hex digits.
func ValidCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// ValidRevision says why rev cannot be a revision (a branch, a tag, a
// commit, refs/pr/N), or nil. It becomes a file under refs/, so it must be
// a relative path that stays there.
func ValidRevision(rev string) error {
	if rev == "" {
		return errors.New("revision is empty; give a branch, a tag or a commit, e.g. main")
	}
	if len(rev) > 256 {
		return fmt.Errorf("revision %q is longer than 256 bytes", rev)
	}
	if err := checkRelPath(rev); err != nil {
		return fmt.Errorf("revision %q: %w", rev, err)
	}
	return nil
}

// CheckRepoPath says why p cannot be a file's path in a repository, or
// nil: it becomes a path under the snapshot directory, so it must be
// relative, without "." or ".." parts, empty parts or backslashes, and
// printable UTF-8. What the Hub's API answers is checked with it before
// anything is named after it: a mirror that answered "../../etc/x" must
// not have a node link outside the cache.
func CheckRepoPath(p string) error {
	if p == "" {
		return errors.New("file path is empty")
	}
	if len(p) > MaxPath/4 {
		return fmt.Errorf("file path %q is longer than %d bytes", p, MaxPath/4)
	}
	if err := checkRelPath(p); err != nil {
		return fmt.Errorf("file path %q: %w", p, err)
	}
	return nil
}

func checkRelPath(p string) error {
	if !utf8.ValidString(p) {
		return errors.New("is not UTF-8")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return errors.New("holds a control character or a backslash")
		}
	}
	if strings.HasPrefix(p, "/") {
		return errors.New("is absolute")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New("has an empty, \".\" or \"..\" part")
		}
	}
	return nil
}

// maxGlobs bounds the --include and --exclude globs of one model.
const maxGlobs = 64

// CheckHub says why h cannot be a Hub model, or nil: a valid repository,
// revision and commit, 1 to MaxHubFiles files of distinct valid paths,
// each with its size and exactly one digest of the right shape, and at
// least one weight file among them, or the snapshot would never count as
// held.
func CheckHub(h Hub) error {
	if err := ValidRepoID(h.Repo); err != nil {
		return err
	}
	if err := ValidRevision(h.Revision); err != nil {
		return err
	}
	switch {
	case !ValidCommit(h.Commit):
		return fmt.Errorf("commit %q is not 40 lowercase hex digits", h.Commit)
	case len(h.Files) == 0:
		return fmt.Errorf("%s at %s: no files selected", h.Repo, h.Commit)
	case len(h.Files) > MaxHubFiles:
		return fmt.Errorf("%s at %s: %d files selected; the limit is %d, narrow the selection with --include and --exclude", h.Repo, h.Commit, len(h.Files), MaxHubFiles)
	case len(h.Include) > maxGlobs || len(h.Exclude) > maxGlobs:
		return fmt.Errorf("more than %d --include or --exclude globs", maxGlobs)
	}
	for _, g := range append(append([]string(nil), h.Include...), h.Exclude...) {
		if g == "" || len(g) > 1024 || !utf8.ValidString(g) || strings.ContainsRune(g, 0) {
			return fmt.Errorf("glob %q: want 1 to 1024 bytes of UTF-8 text", g)
		}
	}
	seen := make(map[string]bool, len(h.Files))
	weights := false
	var total int64
	for _, f := range h.Files {
		if f.Size > MaxHubBytes || total+f.Size > MaxHubBytes {
			return fmt.Errorf("%s at %s: the files add up to more than %s (%s alone is %d bytes); a listing that says so is wrong", h.Repo, h.Commit, FormatBytes(MaxHubBytes), f.Path, f.Size)
		}
		total += max(f.Size, 0)
		if err := CheckRepoPath(f.Path); err != nil {
			return err
		}
		switch {
		case seen[f.Path]:
			return fmt.Errorf("file %s is listed twice", f.Path)
		case f.Size < 0:
			return fmt.Errorf("file %s: size is negative", f.Path)
		case (f.SHA256 == "") == (f.Blob == ""):
			return fmt.Errorf("file %s: give exactly one of sha256 (an LFS file) and blob (a small file's git blob id)", f.Path)
		case f.SHA256 != "" && (!ValidSHA256(f.SHA256) || strings.ToLower(f.SHA256) != f.SHA256):
			return fmt.Errorf("file %s: sha256 %q is not 64 lowercase hex digits", f.Path, f.SHA256)
		case f.Blob != "" && !ValidCommit(f.Blob):
			return fmt.Errorf("file %s: blob %q is not a git blob id (40 lowercase hex digits)", f.Path, f.Blob)
		}
		seen[f.Path] = true
		weights = weights || IsWeightName(path.Base(f.Path))
	}
	if !weights {
		return fmt.Errorf("%s at %s: no weight file (.safetensors, .bin, .pt, .pth or .gguf) is selected, so the snapshot would never count as held; add one with --include", h.Repo, h.Commit)
	}
	return nil
}

// HubSize is the sum of the sizes of h's files.
func HubSize(h Hub) int64 {
	var n int64
	for _, f := range h.Files {
		n += f.Size
	}
	return n
}

// HFCacheDir is the Hugging Face cache of a node whose llmgw cache is
// cacheDir and whose agent.toml sets hfCache ("" for the default).
func HFCacheDir(cacheDir, hfCache string) string {
	if hfCache != "" {
		return hfCache
	}
	return filepath.Join(cacheDir, DefaultHFDir)
}

// RepoFolder is the directory of repo in a Hugging Face cache:
// huggingface_hub's repo_folder_name for a model, "models--ORG--NAME".
func RepoFolder(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// HubRepoDir is repo's directory in the Hugging Face cache hfCache.
func HubRepoDir(hfCache, repo string) string { return filepath.Join(hfCache, RepoFolder(repo)) }

// HubSnapshotDir is the snapshot directory of repo at commit: what a
// job is given as LLMGW_MODEL_PATH.
func HubSnapshotDir(hfCache, repo, commit string) string {
	return filepath.Join(hfCache, RepoFolder(repo), "snapshots", commit)
}

// HubPath is what a job of the Hub model h is given as LLMGW_MODEL_PATH:
// the snapshot directory (what transformers, vLLM and SGLang load), or,
// when every weight file of the selection is a GGUF, the first part of it
// (llama.cpp's -m takes a split model's first part and finds the others
// beside it; a directory it cannot open).
func HubPath(hfCache string, h Hub) string {
	snap := HubSnapshotDir(hfCache, h.Repo, h.Commit)
	first := ""
	for _, f := range h.Files {
		name := path.Base(f.Path)
		if !IsWeightName(name) {
			continue
		}
		if !strings.EqualFold(path.Ext(name), ".gguf") {
			return snap
		}
		if first == "" || strings.Contains(name, "-00001-of-") && !strings.Contains(path.Base(first), "-00001-of-") {
			first = f.Path
		}
	}
	if first == "" {
		return snap
	}
	return HubFilePath(hfCache, h.Repo, h.Commit, first)
}

// HubBlobPath is where the blob named blob of repo lives.
func HubBlobPath(hfCache, repo, blob string) string {
	return filepath.Join(hfCache, RepoFolder(repo), "blobs", blob)
}

// HubFilePath is where the file at p of repo at commit is found: its
// link in the snapshot directory.
func HubFilePath(hfCache, repo, commit, p string) string {
	return filepath.Join(HubSnapshotDir(hfCache, repo, commit), filepath.FromSlash(p))
}

// HubLinkTarget is what the snapshot's link for the file at p holds: the
// blob, relative to the link's directory, as huggingface_hub writes it
// (os.path.relpath), so the cache can be moved or mounted elsewhere.
func HubLinkTarget(p, blob string) string {
	return strings.Repeat("../", strings.Count(p, "/")+2) + "blobs/" + blob
}

// HubRefPath is the file under refs/ naming the commit of rev.
func HubRefPath(hfCache, repo, rev string) string {
	return filepath.Join(hfCache, RepoFolder(repo), "refs", filepath.FromSlash(rev))
}

// HubRefs are the refs a fetch of h writes, each holding h.Commit: main,
// which an engine given the bare id reads (`vllm serve org/name`,
// from_pretrained("org/name")), and the revision asked for when it is a
// branch or tag of another name, as huggingface_hub writes it. main names
// the commit the site serves even when that is a tag's: offline, the
// engine has no other way to be told.
func HubRefs(h Hub) []string {
	refs := []string{"main"}
	if h.Revision != "main" && h.Revision != h.Commit && !ValidCommit(h.Revision) {
		refs = append(refs, h.Revision)
	}
	return refs
}

// ReadHubRef reads the ref at p (HubRefPath), at most a commit's length
// and a byte: whoever wrote the cache (a shared one) chose its size, and
// the hooks' fast path must not read a gigabyte to find it is no commit.
func ReadHubRef(p string) (string, error) {
	f, err := OpenRegular(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 41))
	return string(b), err
}

// HubRepoOf reads a Hugging Face cache folder name back to its repository
// id ("models--org--name" is "org/name"), or "" when name is not one.
func HubRepoOf(name string) string {
	rest, ok := strings.CutPrefix(name, "models--")
	if !ok {
		return ""
	}
	id := strings.ReplaceAll(rest, "--", "/")
	if ValidRepoID(id) != nil {
		return ""
	}
	return id
}

// HFRef is what an hf: source names: a repository, at a revision when one
// is given, and a file in it, or the whole repository when Path is "".
type HFRef struct {
	Repo     string
	Revision string // "" when the source names none (the Hub's default branch, main)
	Path     string
}

// ParseHF reads an hf: source: hf:ORG/NAME[@REVISION][/PATH]. A revision
// with a slash of the Hub's own (refs/pr/N, refs/convert/NAME) is written
// as the Hub's pages write it; any other (a branch feature/x) is written
// escaped, feature%2Fx, since nothing else says where it ends and the path
// begins. It does no I/O and checks the repository id and the path.
func ParseHF(source string) (HFRef, error) {
	rest, ok := strings.CutPrefix(source, "hf:")
	if !ok {
		return HFRef{}, fmt.Errorf("%q is not an hf: source", source)
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return HFRef{}, fmt.Errorf("%s: write hf:ORG/NAME for a repository, hf:ORG/NAME/FILE for one file, with @REVISION after NAME to pin one", source)
	}
	var ref HFRef
	name := parts[1]
	file := parts[2:]
	if n, rev, found := strings.Cut(name, "@"); found {
		if rev == "" {
			return HFRef{}, fmt.Errorf("%s: empty revision after @; write hf:ORG/NAME@REVISION", source)
		}
		name = n
		if rev == "refs" {
			if len(file) < 2 || file[0] == "" || file[1] == "" {
				return HFRef{}, fmt.Errorf("%s: a revision refs/... is refs/pr/NUMBER or refs/convert/NAME", source)
			}
			if file[0] == "pr" && !digits(file[1]) {
				return HFRef{}, fmt.Errorf("%s: refs/pr/%s is not a pull request; write refs/pr/NUMBER", source, file[1])
			}
			rev, file = "refs/"+file[0]+"/"+file[1], file[2:]
		} else if u, err := urlPathUnescape(rev); err == nil {
			rev = u
		} else {
			return HFRef{}, fmt.Errorf("%s: revision %q is not validly escaped", source, rev)
		}
		if err := ValidRevision(rev); err != nil {
			return HFRef{}, fmt.Errorf("%s: %w", source, err)
		}
		ref.Revision = rev
	}
	ref.Repo = parts[0] + "/" + name
	if err := ValidRepoID(ref.Repo); err != nil {
		return HFRef{}, fmt.Errorf("%s: %w", source, err)
	}
	if len(file) > 0 {
		ref.Path = strings.Join(file, "/")
		if err := CheckRepoPath(ref.Path); err != nil {
			return HFRef{}, fmt.Errorf("%s: %w", source, err)
		}
	}
	return ref, nil
}

// urlPathUnescape is url.PathUnescape without linking net/url into the
// hook binary: %XX sequences, nothing else special.
func urlPathUnescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) || !isHexDigit(s[i+1]) || !isHexDigit(s[i+2]) {
			return "", fmt.Errorf("invalid escape %q", s[i:min(i+3, len(s))])
		}
		b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
		i += 2
	}
	return string(b), nil
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}
