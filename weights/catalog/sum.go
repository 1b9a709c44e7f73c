package catalog

// SumXattr is the extended attribute on a cached file that carries the
// sha256 its fetch verified or computed. The fetcher writes it; the hooks'
// fast path reads it, so that a file of the right size but of other bytes
// than the catalog now wants (the pin moved) is fetched again rather than
// handed to a job.
const SumXattr = "user.llmgw.sha256"
