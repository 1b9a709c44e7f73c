-- Seed requests (llmgw seed): an admin asks K nodes of a fabric to hold a
-- model before any job asks. Like a gc request, the coordinator reaches a
-- node only in the answer to its report; unlike one, it asks again at every
-- report until the node reports holding the model or the deadline passes,
-- so the asks must survive a coordinator restart.

CREATE TABLE seed_requests (
	id       TEXT PRIMARY KEY,
	model    TEXT NOT NULL,
	fabric   TEXT NOT NULL,
	copies   INTEGER NOT NULL,
	created  INTEGER NOT NULL,
	-- deadline is when the coordinator stops asking.
	deadline INTEGER NOT NULL,
	note     TEXT NOT NULL DEFAULT ''
) STRICT;

-- seed_asks is one row per node a request names: asked (held = 0) until
-- done, or not asked at all because it held the model already (held = 1).
CREATE TABLE seed_asks (
	request TEXT NOT NULL REFERENCES seed_requests(id) ON DELETE CASCADE,
	node    TEXT NOT NULL,
	held    INTEGER NOT NULL DEFAULT 0,
	-- handed is when the ask first rode on an answer to the node's report.
	handed  INTEGER NOT NULL DEFAULT 0,
	-- done is when the node first reported holding the model.
	done    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (request, node)
) STRICT;
