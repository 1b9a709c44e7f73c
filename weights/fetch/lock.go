package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockPoll is how often a process waiting for another's fetch tries the
// lock again. flock has no timeout, and a blocked flock cannot be canceled,
// so waiting is polling; a tenth of a second is nothing next to a fetch.
const lockPoll = 100 * time.Millisecond

// lock takes the node-wide lock for one cache file and returns its release.
//
// Every Slurm job's prolog is its own process, so the in-process sharing in
// Ensure cannot stop eight prologs on one node from each fetching the same
// hundred gigabytes. An flock in a node-local directory does: the first
// process fetches, the others wait here and then find the file. The lock is
// never on the cache's own filesystem, because on Lustre, GPFS and some NFS
// mounts flock succeeds for everyone. The kernel drops it when the process
// dies, so a killed fetch never leaves the node locked.
func (f *Fetcher) lock(ctx context.Context, target string) (func(), error) {
	dir := f.LockDir
	if dir == "" {
		var err error
		if dir, err = defaultLockDir(); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock directory: %w", err)
	}
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	name := filepath.Join(dir, hex.EncodeToString(sum[:8])+"-"+filepath.Base(abs)+".lock")
	// The lock file is never removed: unlinking a lock file races with a
	// process that has opened it and is about to lock it.
	fh, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	waited := false
	for {
		err := unix.Flock(int(fh.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			fh.Close()
			return nil, &os.PathError{Op: "flock", Path: name, Err: err}
		}
		if !waited {
			waited = true
			f.logger().WithField("lock", name).Info("another process on this node is fetching this file; waiting for it")
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
	return func() {
		unix.Flock(int(fh.Fd()), unix.LOCK_UN)
		fh.Close()
	}, nil
}

// defaultLockDir is DefaultLockDir when this process can create and write
// it (root, or an operator who made it writable), else
// os.TempDir()/llmgw-locks-<uid>.
//
// The fallback is chosen from the uid alone, not from $XDG_RUNTIME_DIR:
// that variable is set in a login shell and absent in a Slurm job or cron, so
// two processes of one user would pick different directories and not see
// each other's locks. Processes of different users use different directories
// and so do not exclude each other, which is harmless: they cannot write one
// another's cache anyway. A TMPDIR set per job defeats the fallback; the
// default deployment runs as root and uses /run.
func defaultLockDir() (string, error) {
	return pickLockDir(DefaultLockDir, os.TempDir())
}

// pickLockDir is defaultLockDir with its two places as arguments, for tests.
func pickLockDir(preferred, tmp string) (string, error) {
	if err := os.MkdirAll(preferred, 0o755); err == nil && unix.Access(preferred, unix.W_OK) == nil {
		return preferred, nil
	}
	dir := filepath.Join(tmp, fmt.Sprintf("llmgw-locks-%d", os.Getuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("lock directory: %w", err)
	}
	// A shared /tmp lets anyone create this name first; use it only if it is
	// ours and a real directory, not a symlink planted to redirect us.
	st, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("lock directory: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Getuid() {
		return "", fmt.Errorf("lock directory %s is not a directory owned by uid %d; remove it or set a lock directory", dir, os.Getuid())
	}
	return dir, nil
}
