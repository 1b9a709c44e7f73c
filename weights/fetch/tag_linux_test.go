package fetch

import (
	"testing"

	"golang.org/x/sys/unix"
)

// dropTag removes the digest tag a fetch put on path.
func dropTag(t *testing.T, path string) {
	t.Helper()
	if err := unix.Removexattr(path, sumXattr); err != nil {
		t.Fatal(err)
	}
}
