package fetch

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
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
//
// It holds "SHA256 SIZE MTIME_NS": the file's size and modification time
// when it was hashed. The tag is trusted only while both still match, so a
// file written after it was hashed (by a process that should not have, or
// by hand) is hashed again instead of vouched for.
//
// The name and the format are catalog's (catalog.SumXattr), since the hooks'
// fast path reads the same tag without linking the fetcher.
const sumXattr = catalog.SumXattr

// recordSum notes sum on the open file, with the file's size and mtime as
// they are now; call it only when nothing has written the file since it was
// hashed. Best effort: a filesystem without user xattrs only costs a later
// caller a full hash.
func recordSum(fh *os.File, sum string) {
	var st unix.Stat_t
	if unix.Fstat(int(fh.Fd()), &st) != nil {
		return
	}
	_ = unix.Fsetxattr(int(fh.Fd()), sumXattr, []byte(sumTag(sum, &st)), 0)
}

// recordedSumFD is the digest recordSum noted on the open file, while its
// size and mtime are still those it was hashed at; "" otherwise, and for a
// file this process's user does not own: in a Hugging Face cache other
// users write (a site's, on a filer), any user may tag a file of theirs.
func recordedSumFD(fh *os.File) string {
	var st unix.Stat_t
	if unix.Fstat(int(fh.Fd()), &st) != nil || int(st.Uid) != os.Geteuid() {
		return ""
	}
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(int(fh.Fd()), sumXattr, buf)
	if err != nil || n < 64 {
		return ""
	}
	if tag := string(buf[:n]); tag == sumTag(tag[:64], &st) {
		return tag[:64]
	}
	return ""
}

// recordOrigin notes on the open file how the origin named the version it
// served (originOf), with the file's size and mtime as they are now, like
// recordSum, so that whoever pins the file later (the Prolog, which may not
// be the process that fetched it) can tell the coordinator. Best effort.
func recordOrigin(fh *os.File, origin string) {
	var st unix.Stat_t
	if unix.Fstat(int(fh.Fd()), &st) != nil {
		return
	}
	_ = unix.Fsetxattr(int(fh.Fd()), originXattr, []byte(fmt.Sprintf("%d %d %s", st.Size, st.Mtim.Nano(), origin)), 0)
}

// originXattr carries recordOrigin's note: "SIZE MTIME_NS ORIGIN".
const originXattr = "user.llmgw.origin"

// RecordedOrigin is the origin's validator recordOrigin noted on path, or
// "" when none is or the file changed since (its size or mtime differ).
func RecordedOrigin(path string) string {
	buf := make([]byte, 64+maxOrigin)
	n, err := unix.Getxattr(path, originXattr, buf)
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	prefix := fmt.Sprintf("%d %d ", st.Size, st.Mtim.Nano())
	tag := string(buf[:n])
	if !strings.HasPrefix(tag, prefix) {
		return ""
	}
	return tag[len(prefix):]
}

func sumTag(sum string, st *unix.Stat_t) string {
	return fmt.Sprintf("%s %d %d", sum, st.Size, st.Mtim.Nano())
}
