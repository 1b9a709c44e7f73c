package fetch

import "context"

// Digest is the sha256 of a file Ensure returned: the one recorded on it
// when it was fetched (the fetch hashes as it writes), else computed now
// and recorded. A fetch without an expected digest uses it to report what
// it got, for the coordinator to pin.
func Digest(ctx context.Context, path string) (string, error) {
	if sum := recordedSum(path); sum != "" {
		return sum, nil
	}
	sum, err := fileSHA256(ctx, path)
	if err != nil {
		return "", err
	}
	recordSumAt(path, sum)
	return sum, nil
}
