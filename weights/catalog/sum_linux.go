package catalog

import "syscall"

// RecordedSHA256 is the sha256 recorded on path (SumXattr), or "" when none
// is: one getxattr, no read of the file.
func RecordedSHA256(path string) string {
	buf := make([]byte, 64)
	n, err := syscall.Getxattr(path, SumXattr, buf)
	if err != nil || n != 64 {
		return ""
	}
	return string(buf[:n])
}
