package store

import (
	"context"
	"fmt"
	"time"
)

// GCResult is what a node did with one path a gc asked about: listed it
// (the default), removed it (--collect), or refused, with its reason. The
// node decides; this is its answer, kept for `llmgw gc` and status.
type GCResult struct {
	Node   string
	Path   string
	Action string // "listed", "removed" or "refused"
	Reason string
	Size   int64
	Time   time.Time
}

// PutGCResults replaces what is stored of node's last gc answer.
func (db *DB) PutGCResults(ctx context.Context, node string, results []GCResult) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM gc_results WHERE node = ?`, node); err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	for _, r := range results {
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_results (node, path, action, reason, bytes, time)
			VALUES (?, ?, ?, ?, ?, ?)`, node, r.Path, r.Action, r.Reason, r.Size, nanos(r.Time)); err != nil {
			return fmt.Errorf("gc result %s on %s: %w", r.Path, node, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	db.committed()
	return nil
}

// GCResults returns the last gc answers of every node (node "") or of one, in
// node and path order.
func (db *DB) GCResults(ctx context.Context, node string) ([]GCResult, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT node, path, action, reason, bytes, time FROM gc_results
		WHERE ?1 = '' OR node = ?1 ORDER BY node, path`, node)
	if err != nil {
		return nil, fmt.Errorf("gc results: %w", err)
	}
	defer rows.Close()
	out := []GCResult{}
	for rows.Next() {
		var r GCResult
		var t int64
		if err := rows.Scan(&r.Node, &r.Path, &r.Action, &r.Reason, &r.Size, &t); err != nil {
			return nil, fmt.Errorf("gc results: %w", err)
		}
		r.Time = fromNanos(t)
		out = append(out, r)
	}
	return out, rows.Err()
}
