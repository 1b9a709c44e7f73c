package catalog

// SumXattr is the extended attribute on a cached file that carries the
// sha256 its fetch verified or computed, as "SHA256 SIZE MTIME_NS": the
// file's size and modification time when it was hashed, so that a file
// written since is not vouched for. The fetcher writes it
// (weights/fetch/disk_linux.go); the hooks' fast path reads it, so that a
// file of the right size but of other bytes than the catalog now wants
// (the pin moved) is fetched again rather than handed to a job.
const SumXattr = "user.llmgw.sha256"
