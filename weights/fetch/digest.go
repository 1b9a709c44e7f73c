package fetch

import (
	"context"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Digest is the sha256 of a file Ensure returned: the one recorded on it
// when it was verified (and it has not changed since), else computed now,
// which records it. A fetch without an expected digest uses it to report
// what it got, for the coordinator to pin.
func Digest(ctx context.Context, path string) (string, error) {
	if sum := recordedSum(path); sum != "" {
		return sum, nil
	}
	return fileSHA256(ctx, path)
}

// recordedSum is the sha256 recordSum noted on path, or "" when none is or
// when the file's size or mtime is no longer what was hashed. The hooks
// read the same tag through the same function.
func recordedSum(path string) string {
	sum, _ := catalog.RecordedSHA256(path)
	return sum
}
