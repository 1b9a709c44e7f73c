package store

import (
	"context"
	"fmt"
)

// CanWrite checks that the database takes a write by making one: the
// heartbeat row (migration 0011) is rewritten and committed, so the write
// reaches the WAL file. A probe that began a transaction and rolled it
// back wrote nothing, and a database made read-only under a running
// coordinator (a filesystem remounted read-only, chattr +i) went on
// answering it while every report failed. Ping reads only, and a database
// on a filesystem remounted read-only still answers reads.
func (db *DB) CanWrite(ctx context.Context) error {
	// Looked at before sqlite touches the files: see freeze.go.
	if err := db.checkFrozen(); err != nil {
		return fmt.Errorf("database %s: %w", db.path, err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("database %s cannot be written: %w", db.path, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE heartbeat SET beat = beat + 1 WHERE one = 1`); err != nil {
		return fmt.Errorf("database %s cannot be written: %w", db.path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("database %s cannot be written: %w", db.path, err)
	}
	db.committed()
	return nil
}
