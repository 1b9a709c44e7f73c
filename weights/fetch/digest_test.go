package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The hooks' fast path reads the digest the fetcher records, by name.
func TestSumXattrIsTheCatalogs(t *testing.T) {
	if runtime.GOOS == "linux" && sumXattr != catalog.SumXattr {
		t.Fatalf("the fetcher records digests in %s, the hooks read %s", sumXattr, catalog.SumXattr)
	}
}

func TestDigestRecordsWhatItComputes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.gguf")
	body := []byte("some weights")
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(body)
	got, err := Digest(context.Background(), p)
	if err != nil || got != hex.EncodeToString(want[:]) {
		t.Fatalf("Digest = %s, %v; want %x", got, err, want)
	}
	if rec := catalog.RecordedSHA256(p); runtime.GOOS == "linux" && rec != got && recordedSum(p) == got {
		t.Errorf("the hooks read %q where the fetcher recorded %s", rec, got)
	}
}
