package store

import (
	"context"
	"fmt"
)

// CanWrite checks that the database takes a write, without changing it: a
// write transaction is begun (the writer's connections begin IMMEDIATE, so
// this takes sqlite's write lock and needs a writable file, journal and
// directory) and one statement that would write is run and rolled back.
// Ping reads only, and a database on a filesystem remounted read-only
// still answers reads while every report fails.
func (db *DB) CanWrite(ctx context.Context) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("database %s cannot be written: %w", db.path, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog WHERE rowid = -1`); err != nil {
		return fmt.Errorf("database %s cannot be written: %w", db.path, err)
	}
	return nil
}
