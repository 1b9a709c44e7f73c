package fetch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/llmgw/llmgw/weights/catalog"
)

// What a writer outside this package needs to fill a model of several
// files the way the Fetcher does (issue 25): the agent's swarm, which
// fetches a Hub model's or a set's files once per fabric as one revision
// (agent/swarmrev*.go). It writes each file's .part under the Fetcher's
// locks (LockFile), verifies the whole file against its own digest before
// it gets its name (SealHashed), and for a Hub model then links the
// snapshot and writes its refs (LinkHub), as EnsureHub does for blobs it
// finds there.

// HubTarget is where one file of a Hub model goes on this node.
type HubTarget struct {
	File catalog.HubFile
	// Blob is the file's home, blobs/<digest> in the Hugging Face cache;
	// Link its entry in the commit's snapshot.
	Blob, Link string
	// Write is where its bytes are written and verified: Blob, or, when
	// the Hugging Face cache is on another filesystem than the llmgw cache
	// (a site's cache on a filer), its copy in the llmgw cache's staging
	// directory, which PublishHub then copies beside Blob and renames.
	Write string
}

// HubTargets lays out the Hub model h in hfCache, making the directories
// its files go to.
func (f *Fetcher) HubTargets(hfCache string, h catalog.Hub) ([]HubTarget, error) {
	if err := catalog.CheckHub(h); err != nil {
		return nil, err
	}
	if err := catalog.CheckAbsPath("hf_cache", hfCache); err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(catalog.HubRepoDir(hfCache, h.Repo), "blobs"), catalog.HubSnapshotDir(hfCache, h.Repo, h.Commit)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("the Hugging Face cache (hf_cache) cannot be written: %w", err)
		}
	}
	stage, err := f.hubStaging(hfCache, h.Repo)
	if err != nil {
		return nil, err
	}
	out := make([]HubTarget, len(h.Files))
	for i, file := range h.Files {
		t := HubTarget{File: file, Blob: catalog.HubBlobPath(hfCache, h.Repo, file.BlobName()),
			Link: catalog.HubFilePath(hfCache, h.Repo, h.Commit, file.Path)}
		t.Write = t.Blob
		if stage != "" {
			t.Write = filepath.Join(stage, file.BlobName())
		}
		out[i] = t
	}
	return out, nil
}

// Want is what the file's bytes must be.
func (t HubTarget) Want(commit string) Want {
	return Want{SHA256: t.File.SHA256, GitBlob: t.File.Blob, Size: t.File.Size, Commit: commit}
}

// Held is where this node holds the file's bytes already, verified, or ""
// when it does not: the blob, of the right size, whose digest is the
// file's (CheckFile). The Fetcher trusts a blob by its
// name (only a verified file is renamed to it); a swarm member must not,
// since its chunks are served to the fabric and a wrong blob on its disk
// (written by another tool, or damaged) would be read from it.
func (t HubTarget) Held(ctx context.Context) string {
	if whole(t.Blob, t.File.Size) && CheckFile(ctx, t.Blob, Want{SHA256: t.File.SHA256, GitBlob: t.File.Blob, Size: t.File.Size}) == nil {
		return t.Blob
	}
	return ""
}

// PublishHub moves the verified file at t.Write to t.Blob when they
// differ (a Hugging Face cache on another filesystem).
func PublishHub(t HubTarget) error {
	if t.Write == t.Blob {
		return nil
	}
	return publish(t.Write, t.Blob)
}

// LinkHub links every file of the Hub model h into its snapshot, each to
// its blob (which must be there, verified), and then writes its refs, as
// EnsureHub does once every blob is whole; it returns the snapshot
// directory. A link that leads elsewhere is replaced: the swarm checked the
// blobs, not what another tool linked.
func LinkHub(hfCache string, h catalog.Hub) (string, error) {
	dirs := map[string]bool{}
	for _, file := range h.Files {
		link := catalog.HubFilePath(hfCache, h.Repo, h.Commit, file.Path)
		if !whole(catalog.HubBlobPath(hfCache, h.Repo, file.BlobName()), file.Size) {
			return "", fmt.Errorf("file %s: its blob %s is not there whole", file.Path, file.BlobName())
		}
		if err := linkBlob(link, catalog.HubLinkTarget(file.Path, file.BlobName())); err != nil {
			return "", fmt.Errorf("file %s: %w", file.Path, err)
		}
		dirs[filepath.Dir(link)] = true
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return "", err
		}
	}
	for _, ref := range catalog.HubRefs(h) {
		if err := WriteHubRef(hfCache, h.Repo, ref, h.Commit); err != nil {
			return "", err
		}
	}
	return catalog.HubSnapshotDir(hfCache, h.Repo, h.Commit), nil
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
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case want.Size > 0 && fi.Size() != want.Size:
		return fmt.Errorf("%s has %d bytes, expected %d", path, fi.Size(), want.Size)
	}
	if want.SHA256 != "" {
		sum := recordedSum(path)
		if sum == "" {
			if sum, err = hashFD(ctx, fh); err != nil {
				return err
			}
			recordSum(fh, sum)
		}
		if sum != want.SHA256 {
			return fmt.Errorf("%s has sha256 %s, expected %s", path, sum, want.SHA256)
		}
	}
	return checkGitBlob(ctx, fh, path, fi.Size(), want.GitBlob)
}

// ClaimRoom claims, before the first byte, the room a writer outside this
// package will still write into dir for a model of several files: need
// bytes, of which the largest single file is largest (a staging directory,
// when set, must hold that much on its own filesystem too). It fails with
// ErrNoSpace, naming the sizes and the mount, when they do not fit; the
// release is for the caller to call when it is done.
//
// This checks the free space, as EnsureHub did on main when it was
// written. The node's record of claims (issue 27: ClaimSpace, ClaimSet, and
// EnsureHub's claimHub, with eviction through MakeRoom) supersedes it: once
// that is merged, this claims there, as claimHub does for a Hub model's
// blobs directory and ClaimSet for a set directory, so that a swarm's
// model and the Fetcher's fetches on the node are one budget.
func (f *Fetcher) ClaimRoom(ctx context.Context, dir, stage string, need, largest int64) (release func(), err error) {
	if err := checkSpace(dir, need); err != nil {
		return nil, err
	}
	if stage != "" {
		if err := checkSpace(stage, largest); err != nil {
			return nil, fmt.Errorf("the llmgw cache, where each file is written before it moves to hf_cache: %w", err)
		}
	}
	return func() {}, nil
}

// StagingOf is the staging directory of t, "" when it is written in place.
func (t HubTarget) StagingOf() string {
	if t.Write == t.Blob {
		return ""
	}
	return filepath.Dir(t.Write)
}
