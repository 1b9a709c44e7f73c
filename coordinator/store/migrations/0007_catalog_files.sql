-- catalog_files lists the files of a model made of several (catalog.File,
-- weights/catalog/set.go): the parts of a split GGUF, a checkpoint with its
-- config and tokenizer files. They are fetched into one directory per model
-- and counted held only all together. A model of one source has no rows
-- here and is read exactly as before; a model of several keeps its first
-- file's source in catalog.source too, so that readers that know nothing
-- of this table still name it by a source of its own.
--
-- Each file is pinned on its own (pinned_*): the first verified fetch of a
-- file declared without a sha256, as the pins table does for a model of one
-- source. A source is one file of one model only, as catalog.source is one
-- model's: a file in two sets would be one file in two directories, and
-- its pin one model's decision about another's bytes.
CREATE TABLE catalog_files (
	name          TEXT NOT NULL REFERENCES catalog (name) ON DELETE CASCADE,
	idx           INTEGER NOT NULL,
	source        TEXT NOT NULL UNIQUE,
	size_bytes    INTEGER NOT NULL DEFAULT 0,
	sha256        TEXT NOT NULL DEFAULT '',
	pinned_sha256 TEXT NOT NULL DEFAULT '',
	pinned_etag   TEXT NOT NULL DEFAULT '',
	pinned_node   TEXT NOT NULL DEFAULT '',
	pinned        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (name, idx)
) STRICT;
