package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// The per-chunk digest list of a catalog file, recorded with its pin
// (migrations/0009_chunk_sums.sql, coordinator/swarmsums.go).

// RecordChunkSums records sums, the sha256 of each chunk of chunk bytes of
// the file source of model at sha256 (size bytes), verified by nodes, and
// returns the list recorded: sums, or the list recorded before it, which a
// later one never replaces. A model that is no catalog entry, or whose
// entry no longer names source, wraps ErrNotFound.
func (db *DB) RecordChunkSums(ctx context.Context, model, source, sha256 string, size, chunk int64, sums, nodes []string, now time.Time) ([]string, error) {
	if chunk <= 0 || int64(len(sums)) != (size+chunk-1)/chunk {
		return nil, fmt.Errorf("record chunk sums of %s: %d digests for %d bytes in chunks of %d", source, len(sums), size, chunk)
	}
	blob := make([]byte, 0, 32*len(sums))
	for i, s := range sums {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("record chunk sums of %s: digest %d is not a sha256", source, i)
		}
		blob = append(blob, b...)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("record chunk sums of %s: %w", source, err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM catalog WHERE name = ? AND (source = ? OR EXISTS
		(SELECT 1 FROM catalog_files WHERE catalog_files.name = catalog.name AND catalog_files.source = ?))`, model, source, source).Scan(&one)
	if err == sql.ErrNoRows {
		return nil, fmt.Errorf("model %s with file %s: %w", model, source, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("record chunk sums of %s: %w", source, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO chunk_sums (name, source, sha256, chunk_size, size_bytes, sums, nodes, recorded)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		model, source, sha256, chunk, size, blob, strings.Join(nodes, ","), nanos(now)); err != nil {
		return nil, fmt.Errorf("record chunk sums of %s: %w", source, err)
	}
	list, err := chunkSums(ctx, tx, source, sha256, chunk)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("record chunk sums of %s: %w", source, err)
	}
	db.committed()
	return list, nil
}

// ChunkSums is the digest list recorded for source at sha256 in chunks of
// chunk bytes, nil when none is.
func (db *DB) ChunkSums(ctx context.Context, source, sha256 string, chunk int64) ([]string, error) {
	return chunkSums(ctx, db.cr(), source, sha256, chunk)
}

func chunkSums(ctx context.Context, q rowQuerier, source, sha256 string, chunk int64) ([]string, error) {
	var blob []byte
	err := q.QueryRowContext(ctx, `SELECT sums FROM chunk_sums WHERE source = ? AND sha256 = ? AND chunk_size = ?`, source, sha256, chunk).Scan(&blob)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chunk sums of %s: %w", source, err)
	}
	if len(blob)%32 != 0 {
		return nil, fmt.Errorf("chunk sums of %s: %d bytes is no list of sha256 digests", source, len(blob))
	}
	out := make([]string, len(blob)/32)
	for i := range out {
		out[i] = hex.EncodeToString(blob[32*i : 32*i+32])
	}
	return out, nil
}
