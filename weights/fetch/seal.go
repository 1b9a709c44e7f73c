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
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if want.Size > 0 && fi.Size() != want.Size {
		return fmt.Errorf("%s has %d bytes, expected %d", part, fi.Size(), want.Size)
	}
	if want.SHA256 != "" {
		sum, err := hashFD(ctx, fh)
		if err != nil {
			return err
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
