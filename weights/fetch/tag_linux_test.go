package fetch

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The hooks' fast path reads the digest the fetcher records, by name.
func TestSumXattrIsTheCatalogs(t *testing.T) {
	if sumXattr != catalog.SumXattr {
		t.Fatalf("the fetcher records digests in %s, the hooks read %s", sumXattr, catalog.SumXattr)
	}
}

// dropTag removes the digest tag a fetch put on path.
func dropTag(t *testing.T, path string) {
	t.Helper()
	if err := unix.Removexattr(path, sumXattr); err != nil {
		t.Fatal(err)
	}
}
