-- Per-node tokens, for sites without munge: one per node, bound to its
-- name, made by `llmgw nodes token NODE` and installed on the node like a
-- host key. Only the token's sha256 is kept; the token is shown once. Not
-- tied to the nodes table: a node gets its token before its first report,
-- and keeps it when it is forgotten.
CREATE TABLE node_tokens (
	node    TEXT PRIMARY KEY,
	sha256  BLOB NOT NULL UNIQUE,
	created INTEGER NOT NULL
) STRICT;
