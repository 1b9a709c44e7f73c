package fetch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Seal verifies a complete .part that a fetch outside this package wrote
// (the agent's swarm fetch, which reads chunks from peers) and renames it to
// target, the way a Fetcher ends its own downloads: the size and the sha256
// are checked through the open descriptor fh, the file is synced and tagged
// with its digest, and it is renamed only while part still names that inode,
// so what appears under target is what was verified. A mismatch leaves the
// .part in place for the caller to judge.
func Seal(ctx context.Context, fh *os.File, part, target string, want Want) error {
	return SealHashed(ctx, fh, part, target, want, "")
}

// SealHashed is Seal for a caller that has already hashed the whole file by
// reading it through fh as it was written (the swarm fetch hashes its
// verified prefix as it grows, so that the fabric's nodes do not all hash
// their whole copy at the moment the last chunk lands): sum is that
// digest, or "" to hash the file here.
func SealHashed(ctx context.Context, fh *os.File, part, target string, want Want, sum string) error {
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if want.Size > 0 && fi.Size() != want.Size {
		return fmt.Errorf("%s has %d bytes, expected %d", part, fi.Size(), want.Size)
	}
	// A small file of a Hub repository: named by its git blob id, which is
	// read here (the Hub keeps such files under 10 MB).
	if err := checkGitBlob(ctx, fh, part, fi.Size(), want.GitBlob); err != nil {
		return err
	}
	if want.SHA256 != "" {
		if sum == "" {
			if sum, err = hashFD(ctx, fh); err != nil {
				return err
			}
		}
		if sum != want.SHA256 {
			return fmt.Errorf("%s has sha256 %s, expected %s", part, sum, want.SHA256)
		}
		if err := fh.Sync(); err != nil {
			return err
		}
		recordSum(fh, sum)
	} else if err := fh.Sync(); err != nil {
		return err
	}
	if !sameFile(fh, part) {
		return fmt.Errorf("%s is no longer the file that was written and verified; not renaming it", part)
	}
	if err := os.Rename(part, target); err != nil {
		return err
	}
	return syncDir(filepath.Dir(target))
}

// checkGitBlob says whether the file open as fh (named name in errors), of
// size bytes, has the git blob id want; nil when want is "".
func checkGitBlob(ctx context.Context, fh *os.File, name string, size int64, want string) error {
	if want == "" {
		return nil
	}
	id, err := gitBlobFD(ctx, fh, size)
	if err != nil {
		return err
	}
	if id != want {
		return fmt.Errorf("%s has git blob id %s, expected %s", name, id, want)
	}
	return nil
}
