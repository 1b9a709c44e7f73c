-- Cluster-wide gc requests. The coordinator cannot reach a node's socket,
-- so a request waits here until each node's agent reports, is handed to it
-- in the answer to that report, and the agent posts back what it did.

CREATE TABLE gc_requests (
	id       TEXT PRIMARY KEY,
	collect  INTEGER NOT NULL,
	-- node is the one node asked, or '' for every node known at creation.
	node     TEXT NOT NULL DEFAULT '',
	created  INTEGER NOT NULL,
	-- deadline is when the request stops being handed out: a node that
	-- reports later never gets it (the operator was told it did not answer,
	-- and must not find its files gone an hour afterwards).
	deadline INTEGER NOT NULL
) STRICT;

-- gc_asks is one row per node a request asks: what it was asked to remove
-- (a JSON array of names) and when, and the summary of its answer.
CREATE TABLE gc_asks (
	request   TEXT NOT NULL REFERENCES gc_requests(id) ON DELETE CASCADE,
	node      TEXT NOT NULL,
	handed    INTEGER NOT NULL DEFAULT 0,
	asked     TEXT NOT NULL DEFAULT '[]',
	answered  INTEGER NOT NULL DEFAULT 0,
	cache_dir TEXT NOT NULL DEFAULT '',
	freed     INTEGER NOT NULL DEFAULT 0,
	held      TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (request, node)
) STRICT;

-- gc_results gains the request each answer was to, and is keyed by the name
-- a node answered about rather than a path: a refused name such as
-- "../etc/passwd" has no path in the cache, and must still be reported as
-- asked. SQLite cannot change a primary key in place, hence the copy.
CREATE TABLE gc_results_new (
	node    TEXT NOT NULL,
	name    TEXT NOT NULL,
	path    TEXT NOT NULL DEFAULT '',
	request TEXT NOT NULL DEFAULT '',
	asked   INTEGER NOT NULL DEFAULT 0,
	action  TEXT NOT NULL,
	reason  TEXT NOT NULL DEFAULT '',
	bytes   INTEGER NOT NULL DEFAULT 0,
	time    INTEGER NOT NULL,
	PRIMARY KEY (node, name)
) STRICT;
INSERT INTO gc_results_new (node, name, path, action, reason, bytes, time)
	SELECT node, path, path, action, reason, bytes, time FROM gc_results;
DROP TABLE gc_results;
ALTER TABLE gc_results_new RENAME TO gc_results;
