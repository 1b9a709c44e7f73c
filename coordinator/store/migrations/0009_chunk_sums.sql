-- chunk_sums records, with a catalog entry's pinned file, the sha256 of each
-- of its swarm chunks (issue 24, coordinator/swarmsums.go): the list two
-- members verified the whole file with, against the pin. From then it is
-- every swarm's of the file, in every fabric and after restarts, and no
-- member's digest outranks it; before, a member that claimed to be complete
-- could replace the lease holder's digests, and honest members then found
-- honest peers' chunks bad.
--
-- The list is of one source at one sha256 cut in chunks of one size: a
-- repin is another sha256, another chunk size another list. sums holds the
-- digests as 32 bytes each, in chunk order; nodes the members whose
-- verification recorded it, for admins. A row goes with its catalog entry,
-- and with the entry's pin (Unpin).
CREATE TABLE chunk_sums (
	name       TEXT NOT NULL REFERENCES catalog (name) ON DELETE CASCADE,
	source     TEXT NOT NULL,
	sha256     TEXT NOT NULL,
	chunk_size INTEGER NOT NULL,
	size_bytes INTEGER NOT NULL,
	sums       BLOB NOT NULL,
	nodes      TEXT NOT NULL DEFAULT '',
	recorded   INTEGER NOT NULL,
	PRIMARY KEY (source, sha256, chunk_size)
) STRICT;
CREATE INDEX chunk_sums_name ON chunk_sums (name);

-- peer_addr is the chunk server address of the node's last report: kept, so
-- that a restarted coordinator offers a node as a swarm peer at once, not
-- only after the node's next report (up to report_interval later), while
-- its swarm reports are back within a fraction of a second.
ALTER TABLE nodes ADD COLUMN peer_addr TEXT NOT NULL DEFAULT '';
