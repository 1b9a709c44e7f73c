-- The catalog's identity and generation. Nodes collect their caches against
-- the catalog they last read, and a catalog that shrank by accident (a
-- backup restored, a second coordinator on a fresh database) would have
-- every node delete what it no longer lists. id is made once with the
-- database, so a node can tell another database from this one;
-- generation counts every change to the catalog, so it can tell an older
-- state of this one (a restored backup) from a newer. A node refuses to
-- collect against either.
CREATE TABLE catalog_identity (
	one        INTEGER PRIMARY KEY CHECK (one = 1),
	id         TEXT NOT NULL,
	generation INTEGER NOT NULL
) STRICT;
INSERT INTO catalog_identity (one, id, generation)
	VALUES (1, lower(hex(randomblob(16))), 1);

-- force is `llmgw gc --collect --force`: the nodes collect even against a
-- catalog of another identity or an older generation, and beyond
-- gc_max_share of their cache.
ALTER TABLE gc_requests ADD COLUMN force INTEGER NOT NULL DEFAULT 0;
