package fetch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// statfsFree reports the bytes an unprivileged writer may still use on the
// filesystem holding dir, and that filesystem's mount point. A variable so
// tests can stand in a full disk without filling one.
var statfsFree = diskFree

func diskFree(dir string) (free int64, mount string, err error) {
	r, err := statRoom(dir)
	if err != nil {
		return 0, "", err
	}
	return r.Free, mountPoint(dir), nil
}

// Room is the space on the filesystem that holds a directory.
type Room struct {
	// Free is what an unprivileged writer may still use: Bavail, not Bfree.
	// The blocks reserved for root are not ours to plan with even when
	// running as root, and filling them breaks the node.
	Free  int64
	Total int64
}

// RoomFor reports the room on the filesystem that holds dir. A directory
// that does not exist yet will be created on the filesystem of its nearest
// existing parent, so that is the room reported for it.
func RoomFor(dir string) (Room, error) {
	p := filepath.Clean(dir)
	for {
		r, err := statRoom(p)
		parent := filepath.Dir(p)
		if err == nil || !errors.Is(err, os.ErrNotExist) || parent == p {
			return r, err
		}
		p = parent
	}
}

func statRoom(dir string) (Room, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Room{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return Room{Free: int64(st.Bavail) * int64(st.Bsize), Total: int64(st.Blocks) * int64(st.Bsize)}, nil
}

// mountPoint is the topmost ancestor of dir on the same device: the mount an
// operator will recognise in a "disk full" message.
func mountPoint(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	dev := func(p string) (uint64, bool) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			return 0, false
		}
		return uint64(st.Dev), true
	}
	d, ok := dev(dir)
	if !ok {
		return dir
	}
	for dir != "/" {
		parent := filepath.Dir(dir)
		if pd, ok := dev(parent); !ok || pd != d {
			break
		}
		dir = parent
	}
	return dir
}

// checkSpace refuses a fetch that cannot fit: need more bytes than the
// filesystem holding dir has free. Refusing up front beats filling the disk
// that the node's jobs and logs also live on.
func checkSpace(dir string, need int64) error {
	if need <= 0 {
		return nil
	}
	free, mount, err := statfsFree(dir)
	if err != nil {
		return nil // unknowable; ENOSPC during the fetch still says it clearly
	}
	if need > free {
		return fmt.Errorf("%w: needs %s, %s free on %s", ErrNoSpace, catalog.FormatBytes(need), catalog.FormatBytes(free), mount)
	}
	return nil
}

// noSpace turns ENOSPC from a write into the same clear error checkSpace
// gives; other errors pass through. need is what is still to be written, or
// negative when unknown.
func noSpace(err error, dir string, need int64) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	free, mount, serr := statfsFree(dir)
	if serr != nil {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	if need <= 0 { // the origin gave no length
		return fmt.Errorf("%w: the disk filled during the fetch, %s free on %s", ErrNoSpace, catalog.FormatBytes(free), mount)
	}
	return fmt.Errorf("%w: needs %s more, %s free on %s", ErrNoSpace, catalog.FormatBytes(need), catalog.FormatBytes(free), mount)
}

// allocated is how many bytes of disk a file already occupies; a
// preallocated .part from an earlier attempt needs no more room.
func allocated(fh *os.File) int64 {
	var st unix.Stat_t
	if unix.Fstat(int(fh.Fd()), &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// syncDir makes a rename in dir durable: without it a crash can bring back
// the directory as it was, with the .part and without the file.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
