//go:build !linux

package fetch

import "os"

// preallocate gives fh its final size. Without fallocate the file is sparse,
// so a full disk shows only as ENOSPC during the fetch; llmgw runs on Linux,
// and this keeps the package building elsewhere for development.
func preallocate(fh *os.File, size int64) error {
	return fh.Truncate(size)
}

// startWriteOut does nothing where sync_file_range does not exist; the fsync
// before the rename still makes the file durable, only later.
func startWriteOut(fd int, off, n int64) {}

// Without user xattrs a cached file's digest is not remembered: a caller
// expecting one hashes the file again.
func recordSum(fh *os.File, sum string) {}

// Nor is the origin's validator.
func recordOrigin(fh *os.File, origin string) {}

// RecordedOrigin finds nothing without user xattrs.
func RecordedOrigin(path string) string { return "" }

// Nor is it read back.
func recordedSumFD(fh *os.File) string { return "" }
