-- One row the readiness probe rewrites on every probe. A probe that only
-- begins a transaction and rolls it back writes nothing, so sqlite never
-- touches the files and a database made read-only under a running
-- coordinator (a filesystem remounted read-only, chattr +i) still looked
-- ready while every report failed. A committed write of this row must
-- reach the WAL, where a read-only file refuses it at once.
CREATE TABLE IF NOT EXISTS heartbeat (
	one  INTEGER PRIMARY KEY CHECK (one = 1),
	beat INTEGER NOT NULL
) STRICT;
INSERT OR IGNORE INTO heartbeat (one, beat) VALUES (1, 0);
