-- catalog_hub makes a catalog entry a Hugging Face repository at one commit
-- (catalog.Hub, weights/catalog/hub.go): the repository, the revision the
-- admin asked for and the commit it resolved to, the admin's --include and
-- --exclude globs (JSON arrays), and whether the files were named one by
-- one (listed). The entry's catalog.source is hf:REPO@COMMIT, so that a
-- reader that knows nothing of this table names it by a source no older
-- agent fetches.
--
-- A repository is one model: its id is unique here without regard to case,
-- as the Hub compares ids. Two entries of one repository would both be
-- refs/main in every node's Hugging Face cache, and an engine given the
-- repository id could load either.
CREATE TABLE catalog_hub (
	name      TEXT PRIMARY KEY REFERENCES catalog (name) ON DELETE CASCADE,
	repo      TEXT NOT NULL,
	revision  TEXT NOT NULL,
	commit_id TEXT NOT NULL,
	include   TEXT NOT NULL DEFAULT '[]',
	exclude   TEXT NOT NULL DEFAULT '[]',
	listed    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE UNIQUE INDEX catalog_hub_repo ON catalog_hub (repo COLLATE NOCASE);

-- catalog_hub_files are the selected files of the commit, each with its
-- size and the digest the Hub publishes for it: an LFS file's sha256, or a
-- small file's git blob id; exactly one is set. A new revision replaces
-- them whole.
CREATE TABLE catalog_hub_files (
	name       TEXT NOT NULL REFERENCES catalog_hub (name) ON DELETE CASCADE,
	idx        INTEGER NOT NULL,
	path       TEXT NOT NULL,
	size_bytes INTEGER NOT NULL,
	sha256     TEXT NOT NULL DEFAULT '',
	blob       TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (name, idx)
) STRICT;
