//go:build unix

package gc

import (
	"io/fs"
	"syscall"
)

// allocatedOf is the bytes fi's file occupies on disk.
func allocatedOf(fi fs.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int64(st.Blocks) * 512, true
}
