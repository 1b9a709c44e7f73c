package weights

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes for fh, so a parallel fetch learns of a
// full disk before it has downloaded anything and the file is not
// fragmented by eight writers. Filesystems without fallocate get a sparse
// file of the right size instead.
func preallocate(fh *os.File, size int64) error {
	err := unix.Fallocate(int(fh.Fd()), 0, 0, size)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		return fh.Truncate(size)
	}
	return &os.PathError{Op: "fallocate", Path: fh.Name(), Err: err}
}

// startWriteOut asks the kernel to start writing [off, off+n) of fd to disk
// and returns without waiting. Errors surface at the fsync.
func startWriteOut(fd int, off, n int64) {
	unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}
