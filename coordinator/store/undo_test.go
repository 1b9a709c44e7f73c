package store

// undoLater undoes what the migrations after 0008 made (0012's heartbeat,
// 0013's history, adoption and columns), for the tests that take a database
// back to an older schema and have the migrations run again.
const undoLater = `DROP TABLE IF EXISTS heartbeat; DROP TABLE IF EXISTS catalog_changes; DROP TABLE IF EXISTS catalog_dropped;
	DROP TABLE IF EXISTS catalog_trust; ALTER TABLE gc_requests DROP COLUMN trust;
	ALTER TABLE nodes DROP COLUMN gc_held; ALTER TABLE nodes DROP COLUMN gc_held_since; `
