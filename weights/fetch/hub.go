package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

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
// The blobs of a cache on another filesystem than the llmgw cache (a
// site's shared cache on a filer) are fetched into the llmgw cache first,
// where the node's own locks and resume work, then copied beside their
// final name and renamed into place: two nodes filling one filer never
// write the same file.

// stagingDir is where blobs bound for another filesystem are fetched first.
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
	snap := catalog.HubSnapshotDir(hfCache, h.Repo, h.Commit)
	for _, d := range []string{filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail("mkdir", fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err))
		}
	}
	stage, err := f.hubStaging(hfCache, h.Repo)
	if err != nil {
		return fail("mkdir", err)
	}
	if err := hubRoom(stage, h, hubMissing(hfCache, h)); err != nil {
		return fail("space", err)
	}
	// The whole model's room before its first byte, in the node's record
	// of space (see claimHub); renewed at each file, dropped at the end.
	if err := f.claimHub(ctx, hfCache, h); err != nil {
		return fail("space", err)
	}
	defer f.dropClaim(context.WithoutCancel(ctx), filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"))
	total := catalog.HubSize(h)
	var done int64
	report := func(n int64) {
		if f.OnProgress != nil {
			f.OnProgress(Progress{Source: source, Done: done + n, Total: total})
		}
	}
	report(0)
	dirs := map[string]bool{}
	for i, file := range h.Files {
		link := catalog.HubFilePath(hfCache, h.Repo, h.Commit, file.Path)
		dirs[filepath.Dir(link)] = true
		if !linked(link, file.Size) {
			blob := catalog.HubBlobPath(hfCache, h.Repo, file.BlobName())
			if !whole(blob, file.Size) {
				if err := f.fetchBlob(ctx, hfCache, h, file, blob, stage, report); err != nil {
					return "", &Error{Source: source, Op: opOf(err), Err: fmt.Errorf("file %d of %d, %s: %w", i+1, len(h.Files), file.Path, errOf(err))}
				}
			}
			if err := linkBlob(link, catalog.HubLinkTarget(file.Path, file.BlobName())); err != nil {
				return fail("link", fmt.Errorf("file %s: %w", file.Path, err))
			}
		}
		done += file.Size
		report(0)
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return fail("sync", err)
		}
	}
	for _, ref := range catalog.HubRefs(h) {
		if err := WriteHubRef(hfCache, h.Repo, ref, h.Commit); err != nil {
			return fail("ref", err)
		}
	}
	return snap, nil
}

// WriteHubRef makes refs/REF of repo in hfCache name commit, as
// huggingface_hub writes it: the hash alone, no newline (it reads the
// file whole into a path). A ref already naming it is not rewritten.
func WriteHubRef(hfCache, repo, ref, commit string) error {
	p := catalog.HubRefPath(hfCache, repo, ref)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	return catalog.WriteAtomic(p, []byte(commit), 0o644)
}

// fetchBlob fetches file of h into blob, through the staging directory
// when stage is set.
func (f *Fetcher) fetchBlob(ctx context.Context, hfCache string, h catalog.Hub, file catalog.HubFile, blob, stage string, report func(int64)) error {
	src := "hf:" + h.Repo + "@" + h.Commit + "/" + file.Path
	rem, err := hubRemote(src, f.hfEndpoint(), h.Repo, h.Commit, file.Path)
	if err != nil {
		return &Error{Source: src, Op: "parse", Err: err}
	}
	rem.progress = func(done, _ int64) { report(done) }
	target := blob
	if stage != "" {
		target = filepath.Join(stage, file.BlobName())
	}
	want := Want{SHA256: file.SHA256, GitBlob: file.Blob, Size: file.Size, Commit: h.Commit}
	// Each file renews the model's claim, so a fetch longer than the
	// claim's life keeps it.
	renew := func(ctx context.Context) error { return f.claimHub(ctx, hfCache, h) }
	if _, err := f.ensureAt(ctx, rem, target, want, renew); err != nil {
		return err
	}
	if stage == "" {
		return nil
	}
	if err := publish(target, blob); err != nil {
		return &Error{Source: src, Op: "write", Err: err}
	}
	return nil
}

// hubMissing is what h still needs in hfCache: the bytes of the files
// neither linked nor whole among the blobs, and the largest of them.
func hubMissing(hfCache string, h catalog.Hub) (m missingFiles) {
	for _, f := range h.Files {
		if linked(catalog.HubFilePath(hfCache, h.Repo, h.Commit, f.Path), f.Size) || whole(catalog.HubBlobPath(hfCache, h.Repo, f.BlobName()), f.Size) {
			continue
		}
		m.bytes += f.Size
		m.largest = max(m.largest, f.Size)
		var st syscall.Stat_t
		if syscall.Stat(catalog.HubBlobPath(hfCache, h.Repo, f.BlobName())+catalog.PartSuffix, &st) == nil {
			m.partial += min(f.Size, int64(st.Blocks)*512)
		}
	}
	return m
}

// missingFiles is what a Hub model still needs: bytes in all, the largest
// file's, and what the .part files of a fetch resumed already hold.
type missingFiles struct{ bytes, largest, partial int64 }

// hubRoom refuses, before the first byte, a model whose largest missing
// file does not fit in the staging directory, when there is one (the
// model's whole claim on its own filesystem is claimHub's).
func hubRoom(stage string, h catalog.Hub, m missingFiles) error {
	if stage != "" {
		if err := checkSpace(stage, m.largest); err != nil {
			return fmt.Errorf("the llmgw cache, where each file of %s is fetched before it moves to hf_cache: %w", h.Repo, err)
		}
	}
	return nil
}

// claimHub claims the room h's missing files will take in its
// repository's blobs directory, whole, before its first byte, in the
// node's record of space where sets and single files claim theirs: each
// file's fetch checks its own size, and a model of thirty shards that fit
// one by one but not together would fill the disk at the twentieth and
// leave nineteen behind. When it does not fit, MakeRoom evicts first by
// the rules every fetch's shortfall goes through (the agent's eviction);
// then it fails with ErrNoSpace. The blobs fetched into the directory
// (their .part files too) fall under the claim, which shrinks as they
// land; calling it again renews it with what is still missing.
func (f *Fetcher) claimHub(ctx context.Context, hfCache string, h catalog.Hub) error {
	dir := filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs")
	m := hubMissing(hfCache, h)
	// What a resumed fetch's .part files hold is on the disk already, in
	// Base: the claim is what is still to be written.
	need := max(0, m.bytes-m.partial)
	c := claim{PID: os.Getpid(), Part: dir, Size: need, Set: true, Base: dirUsage(dir), Until: time.Now().Add(setClaimFor).UnixNano()}
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
	if b, err = f.fit(ctx, b, dir, need, func(b *spaceBook) (int64, int) { return b.othersThan(dir) }); err != nil {
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

// dropClaim drops this process's claim on part (a file or a directory).
func (f *Fetcher) dropClaim(ctx context.Context, part string) {
	b, err := f.openBook(ctx, part)
	if err != nil {
		return
	}
	b.drop(part)
	b.close()
}

// hubStaging is the directory blobs of repo are fetched into before they
// are copied into hfCache, or "" when hfCache is on the llmgw cache's own
// filesystem and blobs are fetched in place.
func (f *Fetcher) hubStaging(hfCache, repo string) (string, error) {
	if f.CacheDir == "" {
		return "", nil
	}
	var a, b syscall.Stat_t
	if syscall.Stat(hfCache, &a) != nil || syscall.Stat(f.CacheDir, &b) != nil || a.Dev == b.Dev {
		return "", nil
	}
	d := filepath.Join(f.CacheDir, stagingDir, catalog.RepoFolder(repo))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("staging directory for the Hugging Face cache on another filesystem: %w", err)
	}
	return d, nil
}

// publish copies the verified file staged to a name beside blob that no
// other writer uses (the host and process), syncs it and renames it to
// blob, then removes staged. Another node that published the same blob
// meanwhile published the same bytes.
func publish(staged, blob string) error {
	in, err := os.Open(staged)
	if err != nil {
		return err
	}
	defer in.Close()
	host, _ := os.Hostname()
	tmp := filepath.Join(filepath.Dir(blob), "."+filepath.Base(blob)+"."+host+"."+strconv.Itoa(os.Getpid())+".tmp")
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, blob)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	os.Remove(staged)
	return syncDir(filepath.Dir(blob))
}

// linked reports whether the snapshot's entry at link leads to a regular
// file of size bytes: a link into blobs/ as huggingface_hub makes it, or
// whatever else put the file there.
func linked(link string, size int64) bool {
	st, err := os.Stat(link)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// whole reports whether the blob is there, a regular file of size bytes.
// A blob is named by its digest and only ever renamed into place whole.
func whole(blob string, size int64) bool {
	st, err := os.Lstat(blob)
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// linkBlob makes link a symlink to target, replacing what is there only
// by a rename, so that a reader sees the old entry or the new one.
func linkBlob(link, target string) error {
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	if st, err := os.Lstat(link); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory where the file's link belongs; remove it", link)
	}
	tmp := filepath.Join(filepath.Dir(link), "."+filepath.Base(link)+".llmgw-"+strconv.Itoa(os.Getpid())+".tmp")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
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
