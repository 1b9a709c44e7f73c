//go:build !linux

package catalog

// RecordedSHA256 finds nothing: no user xattrs here, so no recorded digest.
func RecordedSHA256(path string) (sum string, tagged bool) { return "", false }

// Untagged is false: no user xattrs here, so no file can carry a tag.
func Untagged(path string) bool { return false }
