package catalog

import (
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
