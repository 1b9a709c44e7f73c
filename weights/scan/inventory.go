package scan

import "time"

// Local is one model a node can see: a single weight file, or a directory
// holding at least one.
type Local struct {
	// Path is where the weights are, as the node sees them.
	Path string `json:"path"`
	// Size is the file's size, or the sum of every file in the directory.
	Size int64 `json:"size_bytes"`
	// Shared marks weights on a network filesystem (by statfs magic) that
	// this node did not have to fill.
	//
	// Twenty nodes each holding their own copy and twenty nodes seeing one
	// filer are the same list of paths and completely different situations:
	// one has twenty copies of a 141 GB model and the other has one.
	Shared bool `json:"shared"`
	// Complete is false for a candidate that looks like weights but is not
	// yet usable: a sharded checkpoint missing a shard, a split GGUF missing a
	// part. Only complete weights count as present anywhere in llmgw.
	Complete bool `json:"complete"`
	// Problem says why an incomplete candidate is incomplete.
	Problem string `json:"problem,omitempty"`
	// ModelID and Revision are set for a Hugging Face hub cache snapshot
	// (models--org--name/snapshots/<rev>): the id an engine would be given.
	ModelID  string `json:"model_id,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// Dir is what one scanned directory looked like.
type Dir struct {
	Path string `json:"path"`
	// Shared is the statfs verdict for the directory's filesystem.
	Shared bool `json:"shared"`
	// FSType names the filesystem (e.g. "nfs", "lustre", "ext4"), for people.
	FSType string `json:"fs_type,omitempty"`
	// Missing is true when the directory does not exist: a mount that has not
	// come back yet, not an error.
	Missing bool `json:"missing,omitempty"`
	// Err is set when the directory could not be scanned (unreadable, or the
	// filesystem stopped answering within the scan timeout).
	Err string `json:"error,omitempty"`
	// Skipped lists entries that were looked at and passed over, with why.
	Skipped []Skip `json:"skipped,omitempty"`
	// SkippedCount is how many entries were skipped in all; Skipped lists at
	// most Options.MaxSkipped of them.
	SkippedCount int `json:"skipped_count,omitempty"`
	// Took is how long the directory took to scan.
	Took time.Duration `json:"took_ns"`
}

// Skip is one entry a scan passed over, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Inventory is the result of a Scan: the weights found, sorted by path and
// de-duplicated, and what each configured directory looked like.
type Inventory struct {
	Weights []Local `json:"weights"`
	Dirs    []Dir   `json:"dirs"`
}
