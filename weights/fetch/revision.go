package fetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// What a writer outside this package needs to fill a Hub model the way
// EnsureHub does (issue 25): the agent's swarm, which fetches a model's
// files once per fabric as one revision (agent/swarmrev.go). Each blob is
// written in the llmgw cache's staging directory under the locks
// EnsureHub's own fetch of it takes (LockHub), verified against its digest
// there before it gets its name (SealHashed), and moved into the Hugging
// Face cache through a directory held open (PublishHub: never through a
// link a user planted); once every blob is in, EnsureHub only links the
// snapshot and writes its refs, as it does for blobs it finds there. The
// model's room is claimed whole before the first byte in the node's record
// of space (ClaimHub), as EnsureHub claims it.

// HubTarget is where one file of a Hub model goes on this node.
type HubTarget struct {
	File catalog.HubFile
	// Blob is the file's home, blobs/<digest> in the Hugging Face cache,
	// where it is read from once there.
	Blob string
	// Write is where its bytes are written and verified first: its name
	// in the llmgw cache's staging directory, which only root writes.
	Write string

	hfCache, repo string
}

// HubTargets lays out the Hub model h for hfCache, making the directories
// its files go to.
func (f *Fetcher) HubTargets(hfCache string, h catalog.Hub) ([]HubTarget, error) {
	if err := catalog.CheckHub(h); err != nil {
		return nil, err
	}
	if err := catalog.CheckAbsPath("hf_cache", hfCache); err != nil {
		return nil, err
	}
	if f.CacheDir == "" {
		return nil, errors.New("no cache directory configured: a Hub model's files are written in the llmgw cache before they move into the Hugging Face cache")
	}
	blobs, done, err := hubBlobs(hfCache, h.Repo)
	if err != nil {
		return nil, err
	}
	done()
	blobs.Close()
	stage := filepath.Join(f.CacheDir, stagingDir, catalog.RepoFolder(h.Repo))
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return nil, fmt.Errorf("staging directory in the llmgw cache: %w", err)
	}
	out := make([]HubTarget, len(h.Files))
	for i, file := range h.Files {
		out[i] = HubTarget{File: file, Blob: catalog.HubBlobPath(hfCache, h.Repo, file.BlobName()),
			Write: filepath.Join(stage, file.BlobName()), hfCache: hfCache, repo: h.Repo}
	}
	return out, nil
}

// hubBlobs opens the blobs directory of repo in hfCache as EnsureHub
// does: under the cache as an os.Root, made if missing, never through a
// link. done closes the root.
func hubBlobs(hfCache, repo string) (*os.File, func(), error) {
	if err := os.MkdirAll(hfCache, 0o755); err != nil {
		return nil, nil, fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err)
	}
	root, err := os.OpenRoot(hfCache)
	if err != nil {
		return nil, nil, fmt.Errorf("the Hugging Face cache (hf_cache): %w", err)
	}
	blobs, err := (&hubRepo{root: root, rel: catalog.RepoFolder(repo)}).dir("blobs")
	if err != nil {
		root.Close()
		return nil, nil, fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err)
	}
	return blobs, func() { root.Close() }, nil
}

// Want is what the file's bytes must be.
func (t HubTarget) Want(commit string) Want {
	return Want{SHA256: t.File.SHA256, GitBlob: t.File.Blob, Size: t.File.Size, Commit: commit}
}

// Held is where this node holds the file's bytes already, verified, or ""
// when it does not: its blob, a regular file (not a link) of the right
// size whose digest is the file's; or, moved in now, a copy whole and
// verified in the staging directory (a fetch that stopped between the two).
// EnsureHub trusts a blob by its name (only a verified file is moved to
// it); a swarm member must not, since it serves its chunks to the fabric,
// and a wrong blob on its disk (another tool's, or damaged) would be read
// from it.
func (t HubTarget) Held(ctx context.Context) string {
	blobs, done, err := hubBlobs(t.hfCache, t.repo)
	if err != nil {
		return ""
	}
	defer done()
	defer blobs.Close()
	want := Want{SHA256: t.File.SHA256, GitBlob: t.File.Blob, Size: t.File.Size}
	name := t.File.BlobName()
	if regularAt(blobs, name, t.File.Size, false) {
		fd, err := unix.Openat(int(blobs.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			fh := os.NewFile(uintptr(fd), t.Blob)
			err = checkOpen(ctx, fh, t.Blob, want)
			fh.Close()
			if err == nil {
				return t.Blob
			}
		}
	}
	if fi, err := os.Lstat(t.Write); err == nil && fi.Mode().IsRegular() && CheckFile(ctx, t.Write, want) == nil &&
		publishAt(t.Write, blobs, name) == nil {
		return t.Blob
	}
	return ""
}

// LockHub takes, for a writer of t's file, the locks EnsureHub's fetch of
// it holds (the blob's, then the staged file's and its .part's): a
// Prolog fetching the model in its own process, or a hand-run llmgw
// fetch, waits for the writer, then finds the blob in place. It returns
// the .part open read-write and the release of all three; the caller
// checks Held again after it.
func (f *Fetcher) LockHub(ctx context.Context, t HubTarget) (*os.File, func(), error) {
	unlock, err := f.lock(ctx, t.Write+".publish")
	if err != nil {
		return nil, nil, err
	}
	fh, release, err := f.LockFile(ctx, t.Write)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return fh, func() { release(); unlock() }, nil
}

// PublishHub moves t's verified file from the staging directory into the
// Hugging Face cache under its blob's name: by a rename on one filesystem,
// else by a copy to a fresh name there and a rename.
func PublishHub(t HubTarget) error {
	blobs, done, err := hubBlobs(t.hfCache, t.repo)
	if err != nil {
		return err
	}
	defer done()
	defer blobs.Close()
	return publishAt(t.Write, blobs, t.File.BlobName())
}

// ClaimHub claims, whole and before its first byte, the room the Hub
// model h's missing files will take, in the node's record of space, as
// EnsureHub claims it (claimHub: eviction first when it does not fit, else
// ErrNoSpace); a staging directory on another filesystem must hold the
// largest missing file. Calling it again renews the claim with what is
// still missing; DropHubClaim drops it.
func (f *Fetcher) ClaimHub(ctx context.Context, hfCache string, h catalog.Hub) error {
	blobs, done, err := hubBlobs(hfCache, h.Repo)
	if err != nil {
		return err
	}
	defer done()
	defer blobs.Close()
	stage := filepath.Join(f.CacheDir, stagingDir, catalog.RepoFolder(h.Repo))
	had := func(file catalog.HubFile) bool { return regularAt(blobs, file.BlobName(), file.Size, false) }
	missing := func() missingFiles { return hubMissing(h, had, stage) }
	if err := hubRoom(hfCache, stage, h, missing()); err != nil {
		return err
	}
	return f.claimHub(ctx, h, filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"), stage, missing)
}

// DropHubClaim drops this process's claim for the Hub model h in hfCache.
func (f *Fetcher) DropHubClaim(ctx context.Context, hfCache string, h catalog.Hub) {
	f.dropClaim(ctx, filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"))
}

// CheckFile says whether the file at path (links followed) is the bytes
// want names: a regular file of want.Size, whose sha256 (the digest
// recorded on it when it was sealed and has not changed since, else
// computed now, and then recorded) or git blob id is want's.
func CheckFile(ctx context.Context, path string, want Want) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	return checkOpen(ctx, fh, path, want)
}

// checkOpen is CheckFile of the file open as fh, named name.
func checkOpen(ctx context.Context, fh *os.File, name string, want Want) error {
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", name)
	case want.Size > 0 && fi.Size() != want.Size:
		return fmt.Errorf("%s has %d bytes, expected %d", name, fi.Size(), want.Size)
	}
	if want.SHA256 != "" {
		sum := recordedSumFD(fh)
		if sum == "" {
			if sum, err = hashFD(ctx, fh); err != nil {
				return err
			}
			recordSum(fh, sum)
		}
		if sum != want.SHA256 {
			return fmt.Errorf("%s has sha256 %s, expected %s", name, sum, want.SHA256)
		}
	}
	return checkGitBlob(ctx, fh, name, fi.Size(), want.GitBlob)
}
