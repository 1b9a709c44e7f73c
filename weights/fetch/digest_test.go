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
	if runtime.GOOS != "linux" {
		return
	}
	if rec, tagged := catalog.RecordedSHA256(p); !tagged || rec != got || recordedSum(p) != got {
		t.Errorf("the hooks read %q (tagged %v), the fetcher %q, where Digest computed %s", rec, tagged, recordedSum(p), got)
	}
	// A file written after it was hashed is vouched for by neither.
	if err := os.WriteFile(p, []byte("other weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rec, tagged := catalog.RecordedSHA256(p); !tagged || rec != "" || recordedSum(p) != "" {
		t.Errorf("after a write the hooks read %q (tagged %v), the fetcher %q; want no digest", rec, tagged, recordedSum(p))
	}
}
