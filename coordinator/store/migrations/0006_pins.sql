-- pins holds, per catalog entry declared without a sha256, the digest of the
-- first verified fetch a node reported: every later fetch, on every node,
-- verifies against it, so one job's nodes load the same bytes even when
-- the origin changes them. source is kept so that a pin never outlives a
-- change of the entry's source; the entry going takes its pin with it.
CREATE TABLE pins (
	name    TEXT PRIMARY KEY REFERENCES catalog (name) ON DELETE CASCADE,
	source  TEXT NOT NULL,
	sha256  TEXT NOT NULL,
	etag    TEXT NOT NULL DEFAULT '',
	node    TEXT NOT NULL DEFAULT '',
	pinned  INTEGER NOT NULL
) STRICT;
