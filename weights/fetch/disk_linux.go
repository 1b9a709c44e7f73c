package fetch

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

// sumXattr is the extended attribute that carries a cached file's verified
// sha256. It travels with the file through the rename into place, so a
// later caller that expects a digest can trust the file without reading
// 100 GB again.
const sumXattr = "user.llmgw.sha256"

// recordSum notes sum on the open file; best effort, since a filesystem
// without user xattrs only costs a later caller a full hash.
func recordSum(fh *os.File, sum string) {
	_ = unix.Fsetxattr(int(fh.Fd()), sumXattr, []byte(sum), 0)
}

// recordedSum is the sha256 noted on path, or "" when none is.
func recordedSum(path string) string {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(path, sumXattr, buf)
	if err != nil || n != 64 {
		return ""
	}
	return string(buf[:n])
}

// recordSumAt notes sum on the file at path; best effort, as recordSum.
func recordSumAt(path, sum string) {
	_ = unix.Setxattr(path, sumXattr, []byte(sum), 0)
}
