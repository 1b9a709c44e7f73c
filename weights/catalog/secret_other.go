//go:build !unix

package catalog

import "os"

// fileOwner: no uids here, so ownership is not checked.
func fileOwner(os.FileInfo) (int, bool) { return 0, false }

// aclOnlyFor: no POSIX ACLs here.
func aclOnlyFor(string, int) bool { return false }
