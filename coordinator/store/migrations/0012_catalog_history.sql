-- The catalog's history, the names its changes dropped, and an admin's
-- adoption of it.
--
-- A node anchored its trust to (identity, generation), and a restored
-- backup of the same database, older, regained that trust once its
-- generation climbed back to the number the node had seen: a counter
-- cannot tell "the same catalog, later" from "another catalog with as many
-- changes". Each change now also gets a random id, and the coordinator
-- hands nodes the ids of its recent changes: a node trusts a catalog whose
-- history holds the change it last trusted, which a restored database,
-- having never made the changes after its backup, cannot show.
CREATE TABLE IF NOT EXISTS catalog_changes (
	generation INTEGER PRIMARY KEY,
	change     TEXT NOT NULL,
	at         INTEGER NOT NULL
) STRICT;
INSERT OR IGNORE INTO catalog_changes (generation, change, at)
	SELECT generation, lower(hex(randomblob(8))), 0 FROM catalog_identity;

-- Cache names an admin's own change dropped from a model (a source
-- replaced by models add, an entry removed by models rm): nodes remove
-- their files without counting them against gc_max_share, since the one
-- who shrank the catalog is known to have meant it, and eviction takes
-- them right after what nothing ever wanted.
CREATE TABLE IF NOT EXISTS catalog_dropped (
	name  TEXT PRIMARY KEY,
	model TEXT NOT NULL,
	at    INTEGER NOT NULL
) STRICT;

-- `llmgw gc --trust`: the catalog change an admin said every node may
-- trust, and when. A node that distrusts the catalog and sees an adoption
-- newer than its distrust adopts that change as its anchor, whether or
-- not it was up when the admin ran it.
CREATE TABLE IF NOT EXISTS catalog_trust (
	one    INTEGER PRIMARY KEY CHECK (one = 1),
	change TEXT NOT NULL,
	at     INTEGER NOT NULL
) STRICT;

-- trust is `llmgw gc --trust`: the nodes asked adopt the current catalog
-- (as every node does through catalog_trust) and run gc under every guard
-- but the catalog's, gc_max_share included.
ALTER TABLE gc_requests ADD COLUMN trust INTEGER NOT NULL DEFAULT 0;

-- A node's gc held by a catalog it does not trust, and since when, as its
-- last report said: `llmgw status` counts them ("gc held on 812 nodes").
ALTER TABLE nodes ADD COLUMN gc_held TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN gc_held_since INTEGER NOT NULL DEFAULT 0;
