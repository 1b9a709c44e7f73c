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

	"github.com/llmgw/llmgw/weights/catalog"
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
//
// The lock is named after the cache directory's identity (device and inode),
// not its spelling: /var/cache/llmgw and a symlink to it are one directory,
// and two processes that spelled it differently must still exclude each
// other, or one truncates the .part the other is writing.
func (f *Fetcher) lock(ctx context.Context, target string) (func(), error) {
	dir, err := f.lockDir()
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Dir(target), &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: filepath.Dir(target), Err: err}
	}
	id := fmt.Sprintf("%d:%d/%s", st.Dev, st.Ino, filepath.Base(target))
	sum := sha256.Sum256([]byte(id))
	name := filepath.Join(dir, hex.EncodeToString(sum[:8])+"-"+filepath.Base(target)+".lock")
	// The lock file is never removed: unlinking a lock file races with a
	// process that has opened it and is about to lock it.
	fh, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := f.flockWait(ctx, fh, "another process on this node is fetching this file; waiting for it"); err != nil {
		fh.Close()
		return nil, err
	}
	return func() {
		unix.Flock(int(fh.Fd()), unix.LOCK_UN)
		fh.Close()
	}, nil
}

// LockFile takes, for a fetch outside this package that writes target's
// .part (the agent's swarm fetch), the locks a Fetcher's own fetch of target
// holds: the node lock, then the .part's flock. Without them a hand-run
// llmgw fetch of the same file could truncate or rename the .part the other
// is writing. It returns the .part open read-write and the release of both;
// the caller checks target again after it, since another process may have
// finished the file while this one waited.
func (f *Fetcher) LockFile(ctx context.Context, target string) (*os.File, func(), error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return nil, nil, fmt.Errorf("cache directory cannot be created: %w", err)
	}
	unlock, err := f.lock(ctx, target)
	if err != nil {
		return nil, nil, err
	}
	for {
		fh, err := f.lockPart(ctx, target+catalog.PartSuffix)
		if errors.Is(err, errPartMoved) {
			continue
		}
		if err != nil {
			unlock()
			return nil, nil, err
		}
		// Closing fh drops its flock; the node lock goes after it.
		return fh, func() { fh.Close(); unlock() }, nil
	}
}

// lockDir is LockDir, created if need be, or the default.
func (f *Fetcher) lockDir() (string, error) {
	if f.LockDir == "" {
		return defaultLockDir()
	}
	if err := os.MkdirAll(f.LockDir, 0o755); err != nil {
		return "", fmt.Errorf("lock directory: %w", err)
	}
	return f.LockDir, nil
}

// flockWait takes an exclusive flock on fh, polling until ctx ends, and logs
// waiting once.
func (f *Fetcher) flockWait(ctx context.Context, fh *os.File, waiting string) error {
	logged := false
	for {
		err := unix.Flock(int(fh.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return &os.PathError{Op: "flock", Path: fh.Name(), Err: err}
		}
		if !logged {
			logged = true
			f.logger().WithField("lock", fh.Name()).Info(waiting)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// errPartMoved means the .part this process locked was renamed into place
// or removed by its owner while this one waited: the file may now be
// present, and a new .part is a new lock.
var errPartMoved = errors.New("the partial file was renamed or removed while waiting for it")

// lockPart opens the .part (creating it empty) and holds an flock on it for
// as long as this process writes it. The node lock already keeps llmgw's
// fetches apart; this is what still keeps them apart when two processes do
// not share a lock directory (the agent with its own run_dir beside a
// hand-run llmgw fetch): nobody truncates, unlinks or renames a .part
// without holding its flock, so nobody does it to one another process is
// writing. The flock is on the inode, so after taking it the name must still
// point at that inode; if it does not, the owner renamed the file into
// place (or discarded it) and the caller looks again.
func (f *Fetcher) lockPart(ctx context.Context, part string) (*os.File, error) {
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.flockWait(ctx, fh, "another process is writing this file's partial download; waiting for it"); err != nil {
		fh.Close()
		return nil, err
	}
	if !sameFile(fh, part) {
		fh.Close()
		return nil, errPartMoved
	}
	return fh, nil
}

// sameFile reports whether name still points at the inode fh has open.
func sameFile(fh *os.File, name string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(fh.Fd()), &a) != nil || unix.Stat(name, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
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
