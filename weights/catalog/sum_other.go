//go:build !linux

package catalog

// RecordedSHA256 is "": no user xattrs here, so no recorded digest.
func RecordedSHA256(path string) string { return "" }
