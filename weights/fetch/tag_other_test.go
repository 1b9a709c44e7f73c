//go:build !linux

package fetch

import "testing"

// dropTag does nothing: without user xattrs no fetch tags a file.
func dropTag(t *testing.T, path string) {}
