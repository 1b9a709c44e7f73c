package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/weights/catalog"
)

// A Hub model (weights/catalog/hub.go) is fetched into the layout
// huggingface_hub writes, and written the way it writes it, so that an
// engine finds it offline by the repository id and huggingface_hub's own
// downloads into the same cache share its blobs:
//
//   - each file is fetched at the model's commit, never at a branch
//     (resolve/COMMIT/PATH), checked against the commit the Hub says it
//     served (X-Repo-Commit), its size, and its digest: the sha256 of an
//     LFS file, the git blob id of a small one; only then is it given its
//     blob's name, and a blob already there under that name is not
//     fetched again (a new revision fetches only the files that changed);
//   - the snapshot's link to the blob is made after the blob is whole, and
//     a link already there that leads to a file of the right size is left
//     as it is, whoever made it; a snapshot directory is one commit's, so
//     a new revision never changes the directory a running job was given;
//   - refs/main (and refs/REVISION for another branch or tag) names the
//     commit only once every file of it is linked, so an engine resolving
//     the id never lands on a snapshot still being filled.
//
// Every blob is fetched in the llmgw cache first (.hub-staging/), where
// the node's own locks and resume work and where only root writes, then
// moved into the Hugging Face cache by a rename, or, on another filesystem
// (a site's shared cache on a filer), copied to a fresh name there and
// renamed: two nodes filling one filer never write the same file, and a
// link a user planted in a shared cache never turns root's writes
// elsewhere (hubfs.go).

// stagingDir is where the blobs of Hub models are fetched first: in the
// llmgw cache, which only root writes, where the node's locks and resume
// work; each is moved into the Hugging Face cache once verified (see
// hubfs.go for why never in place).
const stagingDir = catalog.HubStagingDir

// EnsureHub makes every file of the Hub model h present in the Hugging
// Face cache hfCache and returns the snapshot directory. Errors are
// *Error, and name the file that failed.
func (f *Fetcher) EnsureHub(ctx context.Context, hfCache string, h catalog.Hub) (string, error) {
	source := catalog.HubSource(h.Repo, h.Commit)
	fail := func(op string, err error) (string, error) { return "", &Error{Source: source, Op: op, Err: err} }
	if err := catalog.CheckHub(h); err != nil {
		return fail("parse", err)
	}
	if err := catalog.CheckAbsPath("hf_cache", hfCache); err != nil {
		return fail("parse", err)
	}
	if f.CacheDir == "" {
		return fail("parse", errors.New("no cache directory configured: a Hub model's files are fetched into the llmgw cache before they move into the Hugging Face cache; set --cache-dir"))
	}
	if err := os.MkdirAll(hfCache, 0o755); err != nil {
		return fail("mkdir", fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err))
	}
	root, err := os.OpenRoot(hfCache)
	if err != nil {
		return fail("mkdir", fmt.Errorf("the Hugging Face cache (hf_cache): %w", err))
	}
	defer root.Close()
	repo := &hubRepo{root: root, rel: catalog.RepoFolder(h.Repo)}
	snapRel := "snapshots/" + h.Commit
	blobs, err := repo.dir("blobs")
	if err != nil {
		return fail("mkdir", fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err))
	}
	defer blobs.Close()
	// The directories of the snapshot, by their path in it ("" for its
	// top), each opened once.
	dirs := map[string]*os.File{}
	defer func() {
		for _, d := range dirs {
			d.Close()
		}
	}()
	dirOf := func(p string) (*os.File, string, error) {
		sub, name := path.Split(p)
		if d := dirs[sub]; d != nil {
			return d, name, nil
		}
		d, err := repo.dir(snapRel + "/" + sub)
		if err != nil {
			return nil, "", err
		}
		dirs[sub] = d
		return d, name, nil
	}
	if _, _, err := dirOf(""); err != nil {
		return fail("mkdir", fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err))
	}
	stage := filepath.Join(f.CacheDir, stagingDir, repo.rel)
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return fail("mkdir", fmt.Errorf("staging directory in the llmgw cache: %w", err))
	}

	// What is missing: a file the snapshot does not lead to with its size,
	// whose blob is not there either.
	for _, file := range h.Files {
		if _, _, err := dirOf(file.Path); err != nil {
			return fail("mkdir", fmt.Errorf("file %s: %w", file.Path, err))
		}
	}
	had := func(file catalog.HubFile) bool {
		d, name, err := dirOf(file.Path)
		return (err == nil && regularAt(d, name, file.Size, true)) || regularAt(blobs, file.BlobName(), file.Size, false)
	}
	var missing []int
	for i, file := range h.Files {
		if !had(file) {
			missing = append(missing, i)
		}
	}
	missingNow := func() missingFiles { return hubMissing(h, had, stage) }
	if err := hubRoom(hfCache, stage, h, missingNow()); err != nil {
		return fail("space", err)
	}
	// The whole model's room before its first byte, in the node's record
	// of space (see claimHub); renewed at each file, dropped at the end.
	blobsDir := filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs")
	claim := func(ctx context.Context) error { return f.claimHub(ctx, h, blobsDir, stage, missingNow) }
	if err := claim(ctx); err != nil {
		return fail("space", err)
	}
	defer f.dropClaim(context.WithoutCancel(ctx), blobsDir)
	// One line when the model's fetch starts and one when it ends, not
	// two per file (those are at debug): a 200-file model wrote 400
	// lines into slurmd's log on every node.
	log := f.logger().WithFields(logrus.Fields{"model": h.Repo, "commit": h.Commit})
	start := time.Now()
	if len(missing) > 0 {
		var need int64
		for _, i := range missing {
			need += h.Files[i].Size
		}
		log.WithFields(logrus.Fields{"files": len(missing), "bytes": need, "hf_cache": hfCache}).Info("fetching the files of a Hub model the node lacks")
	}
	total := catalog.HubSize(h)
	var done int64
	report := func(n int64) {
		if f.OnProgress != nil {
			f.OnProgress(Progress{Source: source, Done: done + n, Total: total})
		}
	}
	report(0)
	// place makes file i's link lead to its blob, fetching the blob first
	// when it is not there.
	place := func(i int) error {
		file := h.Files[i]
		d, name, err := dirOf(file.Path)
		if err != nil {
			return &Error{Source: source, Op: "mkdir", Err: fmt.Errorf("file %s: %w", file.Path, err)}
		}
		if regularAt(d, name, file.Size, true) {
			return nil
		}
		if !regularAt(blobs, file.BlobName(), file.Size, false) {
			if err := f.fetchBlob(ctx, h, file, blobs, stage, report, claim); err != nil {
				return &Error{Source: source, Op: opOf(err), Err: fmt.Errorf("file %d of %d, %s: %w", i+1, len(h.Files), file.Path, errOf(err))}
			}
		}
		if err := linkAt(d, name, catalog.HubLinkTarget(file.Path, file.BlobName())); err != nil {
			return &Error{Source: source, Op: "link", Err: fmt.Errorf("file %s: %w", file.Path, err)}
		}
		return nil
	}
	for i, file := range h.Files {
		if err := place(i); err != nil {
			return "", err
		}
		done += file.Size
		report(0)
	}
	// Every link must lead to its file before the refs name the commit: a
	// blob found above may have gone since (an old revision's gc in
	// another process, racing this fetch), and the snapshot would be
	// handed to engines with a dangling link. Such a file is placed again,
	// once.
	for pass := 0; ; pass++ {
		var gone []string
		for i, file := range h.Files {
			d, name, _ := dirOf(file.Path)
			if regularAt(d, name, file.Size, true) {
				continue
			}
			if pass > 0 {
				gone = append(gone, file.Path)
				continue
			}
			if err := place(i); err != nil {
				return "", err
			}
		}
		if len(gone) > 0 {
			return fail("link", fmt.Errorf("%s went from the Hugging Face cache as it was being filled (removed by something else); the next fetch tries again", strings.Join(gone, ", ")))
		}
		if pass > 0 {
			break
		}
	}
	for _, d := range dirs {
		if err := d.Sync(); err != nil {
			return fail("sync", err)
		}
	}
	for _, ref := range catalog.HubRefs(h) {
		if err := writeRef(repo, ref, h.Commit); err != nil {
			return fail("ref", err)
		}
	}
	snap := catalog.HubSnapshotDir(hfCache, h.Repo, h.Commit)
	if len(missing) > 0 {
		log.WithFields(logrus.Fields{"snapshot": snap, "took": time.Since(start).Round(time.Millisecond)}).Info("fetched the files of a Hub model")
	}
	return snap, nil
}

// writeRef makes refs/REF of repo name commit, as huggingface_hub writes
// it: the hash alone, no newline (it reads the file whole into a path). A
// ref already naming it is not rewritten.
func writeRef(repo *hubRepo, ref, commit string) error {
	sub, name := path.Split(ref)
	d, err := repo.dir("refs/" + sub)
	if err != nil {
		return err
	}
	defer d.Close()
	var was string
	if regularAt(d, name, int64(len(commit)), false) {
		b, err := repo.root.ReadFile(path.Join(repo.rel, "refs", ref))
		if err == nil && string(b) == commit {
			return nil
		}
		if catalog.ValidCommit(string(b)) {
			was = string(b)
		}
	}
	err = writeAt(d, name, []byte(commit))
	if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		// A shared cache mounted read-only, or not root's to write: the
		// files are there, but an engine given the id reads the ref.
		names := "names no commit"
		if was != "" {
			names = "names " + was
		}
		repoID := catalog.HubRepoOf(repo.rel)
		cause := err
		var pe *os.PathError
		if errors.As(err, &pe) {
			cause = pe.Err
		}
		return fmt.Errorf("refs/%s of %s in the Hugging Face cache %s %s, not %s, and this node cannot write it (%w): an engine given %s would not load the model's commit. "+
			"The cache's admin can point it there (printf %s > %s), or the model can be registered at the ref's commit",
			ref, repoID, repo.root.Name(), names, commit, cause, repoID, commit, filepath.Join(repo.root.Name(), repo.rel, "refs", ref))
	}
	return err
}

// fetchBlob fetches file of h into the staging directory stage, then moves
// it into blobs. The node-wide lock on the blob spans both: another
// process that waited on it finds the blob in place and fetches nothing.
// renew renews the model's claim before the file's first byte, so a fetch
// longer than the claim's life keeps it.
func (f *Fetcher) fetchBlob(ctx context.Context, h catalog.Hub, file catalog.HubFile, blobs *os.File, stage string, report func(int64), renew func(context.Context) error) error {
	src := "hf:" + h.Repo + "@" + h.Commit + "/" + file.Path
	unlock, err := f.lock(ctx, filepath.Join(stage, file.BlobName()+".publish"))
	if err != nil {
		return &Error{Source: src, Op: "lock", Err: err}
	}
	defer unlock()
	if regularAt(blobs, file.BlobName(), file.Size, false) {
		return nil
	}
	rem, err := hubRemote(src, f.hfEndpoint(), h.Repo, h.Commit, file.Path)
	if err != nil {
		return &Error{Source: src, Op: "parse", Err: err}
	}
	rem.progress = func(done, _ int64) { report(done) }
	rem.quiet = true
	staged := filepath.Join(stage, file.BlobName())
	want := Want{SHA256: file.SHA256, GitBlob: file.Blob, Size: file.Size, Commit: h.Commit}
	if _, err := f.ensureAt(ctx, rem, staged, want, renew); err != nil {
		return err
	}
	if err := publishAt(staged, blobs, file.BlobName()); err != nil {
		return &Error{Source: src, Op: "write", Err: err}
	}
	return nil
}

// missingFiles is what a Hub model still needs: bytes in all, the largest
// file's, and what the .part files of a fetch resumed already hold.
type missingFiles struct{ bytes, largest, partial int64 }

// hubMissing is what h still needs: the files had does not find (neither
// linked in the snapshot nor whole among the blobs), and what is already
// in the staging directory of them: a stopped fetch's .part, or a blob
// fetched whole that did not move in.
func hubMissing(h catalog.Hub, had func(catalog.HubFile) bool, stage string) (m missingFiles) {
	for _, f := range h.Files {
		if had(f) {
			continue
		}
		m.bytes += f.Size
		m.largest = max(m.largest, f.Size)
		for _, name := range []string{f.BlobName() + catalog.PartSuffix, f.BlobName()} {
			var st syscall.Stat_t
			if syscall.Lstat(filepath.Join(stage, name), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				m.partial += min(f.Size, int64(st.Blocks)*512)
				break
			}
		}
	}
	return m
}

// hubRoom refuses, before the first byte, a model whose largest missing
// file does not fit in the staging directory when that is on another
// filesystem than the Hugging Face cache (each file moves out when done;
// the model's whole claim on the cache's filesystem is claimHub's).
func hubRoom(hfCache, stage string, h catalog.Hub, m missingFiles) error {
	if !sameFilesystem(hfCache, stage) {
		if err := checkSpace(stage, m.largest); err != nil {
			return fmt.Errorf("the llmgw cache, where each file of %s is fetched before it moves to hf_cache: %w", h.Repo, err)
		}
	}
	return nil
}

// claimHub claims the room h's missing files will take in its
// repository's blobs directory dir, whole, before its first byte, in the
// node's record of space where sets and single files claim theirs: each
// file's fetch checks its own size, and a model of thirty shards that fit
// one by one but not together would fill the disk at the twentieth and
// leave nineteen behind. When it does not fit, MakeRoom evicts first by
// the rules every fetch's shortfall goes through (the agent's eviction);
// then it fails with ErrNoSpace. Calling it again renews it with what is
// still missing (missing).
//
// Every blob is fetched into stage first. On the same filesystem (the
// Hugging Face cache in the llmgw cache, as by default) the claim covers
// it: what stage and dir gain is done, a resumed fetch's .part there is
// on the disk already and not claimed again, and the file's own fetch
// claims nothing beside the model's (a claim of its own counted each file
// twice while it downloaded, and refused a model that fitted). On another
// filesystem, the file's fetch claims its room there as any fetch does,
// and the model's claim is what the blobs will take in dir.
func (f *Fetcher) claimHub(ctx context.Context, h catalog.Hub, dir, stage string, missing func() missingFiles) error {
	m := missing()
	need := m.bytes
	c := claim{PID: os.Getpid(), Part: dir, Set: true, Until: time.Now().Add(setClaimFor).UnixNano()}
	if sameFilesystem(dir, stage) {
		c.Stage = stage
		need = max(0, m.bytes-m.partial)
	}
	c.Size, c.Base = need, c.usage()
	noRoom := func(err error) error {
		return fmt.Errorf("%s at %s is missing %s on this node, claimed whole before its first byte: %w; nothing more of it was fetched",
			h.Repo, h.Commit, catalog.FormatBytes(m.bytes), err)
	}
	b, err := f.openBook(ctx, dir)
	if err != nil {
		if err := checkSpace(dir, need); err != nil {
			return noRoom(err)
		}
		return nil
	}
	if b, err = f.fit(ctx, b, dir, need, b.has(dir, true), func(b *spaceBook) (int64, int) { return b.othersThan(dir) }); err != nil {
		if b == nil && !isNoSpace(err) {
			if err := checkSpace(dir, need); err != nil {
				return noRoom(err)
			}
			return nil
		}
		return noRoom(err)
	}
	b.drop(dir)
	if need > 0 {
		b.claims = append(b.claims, c)
	}
	return b.close()
}

// sameFilesystem says whether a and b are on one filesystem.
func sameFilesystem(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// dropClaim drops this process's claim on part (a file or a directory).
func (f *Fetcher) dropClaim(ctx context.Context, part string) {
	b, err := f.openBook(ctx, part)
	if err != nil {
		return
	}
	b.drop(part)
	b.close()
}

// opOf and errOf take a fetch's *Error apart, so the Hub model's error
// names the model once and the file once.
func opOf(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Op
	}
	return "get"
}

func errOf(err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Err
	}
	return err
}
