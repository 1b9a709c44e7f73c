-- The catalog is the only state that matters across a restart; everything
-- else here is what agents last said, and is said again within one report
-- interval. Times are Unix nanoseconds (UTC) so that comparisons are integer
-- comparisons.

CREATE TABLE catalog (
	name             TEXT PRIMARY KEY,
	-- One model per source: a reported weight carries one catalog name, and
	-- two names for the same weights would make one of them never held.
	source           TEXT NOT NULL UNIQUE,
	size_bytes       INTEGER NOT NULL DEFAULT 0,
	sha256           TEXT NOT NULL DEFAULT '',
	gpu_memory_bytes INTEGER NOT NULL DEFAULT 0,
	created          INTEGER NOT NULL,
	updated          INTEGER NOT NULL
) STRICT;

CREATE TABLE nodes (
	name              TEXT PRIMARY KEY,
	fabric            TEXT NOT NULL,
	looked            INTEGER NOT NULL,
	cache_dir         TEXT NOT NULL DEFAULT '',
	cache_free_bytes  INTEGER NOT NULL DEFAULT 0,
	cache_total_bytes INTEGER NOT NULL DEFAULT 0,
	agent_version     TEXT NOT NULL DEFAULT '',
	-- received is the coordinator's clock; staleness is judged on it alone,
	-- so a node with a wrong clock is still judged correctly.
	received          INTEGER NOT NULL,
	report_time       INTEGER NOT NULL,
	report_id         TEXT NOT NULL,
	started           INTEGER NOT NULL,
	seq               INTEGER NOT NULL,
	-- weights_hash fingerprints the weights and cache dir last stored, so a
	-- report that changes nothing (nearly all of them) rewrites no presence.
	weights_hash      BLOB,
	errors            TEXT NOT NULL DEFAULT ''
) STRICT;

-- presence is what each node last reported having: ONE JSON array per node,
-- not one row per weight. A report replaces everything its node said before
-- and nothing ever changes a single weight, so the array is the unit that is
-- written: a node's first report inserts one row instead of fifty, which
-- made first-report ingest several times faster. Reports that change no
-- weights (nodes.weights_hash says so) do not touch this table at all, and
-- keeping the array out of the nodes row keeps those writes small.
--
-- Each element is an object, in path order, named as in a report
-- (api.Weight) plus the catalog model:
--   path        TEXT     the cleaned path on the node
--   size_bytes  INTEGER
--   shared      BOOLEAN  on a filesystem other nodes see too
--   complete    BOOLEAN  every file there, nothing partial
--   problem     TEXT     why not complete; absent when none
--   model_id    TEXT     Hugging Face id; absent when not from a hub cache
--   revision    TEXT     hub revision; absent when none
--   model       TEXT     the catalog entry these weights are, computed at
--                        ingest and recomputed when the catalog changes;
--                        absent when they are none
-- Ask SQLite with its JSON functions, e.g. which nodes hold llama:
--   SELECT p.node FROM presence p, json_each(p.weights) j
--     WHERE j.value->>'model' = 'llama';
-- or use the presence_rows view below, one row per weight.
CREATE TABLE presence (
	node    TEXT PRIMARY KEY REFERENCES nodes(name) ON DELETE CASCADE,
	weights TEXT NOT NULL
) STRICT;

-- presence_rows is presence one weight per row, for people; the
-- coordinator never reads it.
CREATE VIEW presence_rows AS
	SELECT p.node AS node,
		j.value ->> 'path' AS path,
		j.value ->> 'size_bytes' AS size_bytes,
		j.value ->> 'shared' AS shared,
		j.value ->> 'complete' AS complete,
		coalesce(j.value ->> 'problem', '') AS problem,
		coalesce(j.value ->> 'model_id', '') AS model_id,
		coalesce(j.value ->> 'revision', '') AS revision,
		j.value ->> 'model' AS model
	FROM presence p, json_each(p.weights) j;

CREATE TABLE fetches (
	node        TEXT NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
	source      TEXT NOT NULL,
	bytes_done  INTEGER NOT NULL,
	bytes_total INTEGER NOT NULL,
	rate        REAL NOT NULL,
	started     INTEGER NOT NULL,
	progressed  INTEGER NOT NULL,
	PRIMARY KEY (node, source)
) STRICT;

-- gc_results keeps the last answer of each node to a gc request, path by
-- path: what it listed, removed or refused, and why.
CREATE TABLE gc_results (
	node   TEXT NOT NULL,
	path   TEXT NOT NULL,
	action TEXT NOT NULL,
	reason TEXT NOT NULL DEFAULT '',
	bytes  INTEGER NOT NULL DEFAULT 0,
	time   INTEGER NOT NULL,
	PRIMARY KEY (node, path)
) STRICT;
