package catalog

import (
	"errors"
	"strconv"
	"syscall"
)

// RecordedSHA256 reads SumXattr on path: tagged says a tag is there, and
// sum is its digest while the file's size and mtime are still those it was
// hashed at ("" otherwise). One getxattr and one stat, no read of the file.
func RecordedSHA256(path string) (sum string, tagged bool) {
	buf := make([]byte, 128)
	n, err := syscall.Getxattr(path, SumXattr, buf)
	if err != nil {
		return "", false
	}
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return "", true
	}
	tag := string(buf[:n])
	if len(tag) < 64 || tag != tag[:64]+" "+strconv.FormatInt(st.Size, 10)+" "+strconv.FormatInt(st.Mtim.Nano(), 10) {
		return "", true
	}
	return tag[:64], true
}

// Untagged reports whether path carries no SumXattr on a filesystem that
// keeps user xattrs: a file nothing vouches for (copied in by hand, or
// fetched by an llmgw older than the tag), which is hashed once by the
// slow path and tagged then. A filesystem without user xattrs can carry no
// tag, and a file there is not Untagged: tagging it is impossible, and
// hashing it at every job start would cost more than the tag saves.
func Untagged(path string) bool {
	_, err := syscall.Getxattr(path, SumXattr, nil)
	return errors.Is(err, syscall.ENODATA)
}
