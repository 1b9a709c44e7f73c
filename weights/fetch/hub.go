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
	if err := hubRoom(hfCache, stage, h); err != nil {
		return fail("space", err)
	}
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
				if err := f.fetchBlob(ctx, h, file, blob, stage, report); err != nil {
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
func (f *Fetcher) fetchBlob(ctx context.Context, h catalog.Hub, file catalog.HubFile, blob, stage string, report func(int64)) error {
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
	if _, err := f.ensureAt(ctx, rem, target, want, nil); err != nil {
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

// hubRoom refuses, before the first byte, a model whose missing files do
// not fit: each file's fetch checks its own size, and a model of thirty
// shards that fit one by one but not together would otherwise fill the
// disk at the twentieth and leave nineteen behind. Through a staging
// directory, that one must hold the largest file, and the cache the sum.
func hubRoom(hfCache, stage string, h catalog.Hub) error {
	var missing, largest int64
	for _, f := range h.Files {
		if linked(catalog.HubFilePath(hfCache, h.Repo, h.Commit, f.Path), f.Size) || whole(catalog.HubBlobPath(hfCache, h.Repo, f.BlobName()), f.Size) {
			continue
		}
		missing += f.Size
		largest = max(largest, f.Size)
	}
	if err := checkSpace(filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"), missing); err != nil {
		return fmt.Errorf("%s at %s is missing %s on this node: %w", h.Repo, h.Commit, catalog.FormatBytes(missing), err)
	}
	if stage != "" {
		if err := checkSpace(stage, largest); err != nil {
			return fmt.Errorf("the llmgw cache, where each file of %s is fetched before it moves to hf_cache: %w", h.Repo, err)
		}
	}
	return nil
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
