package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// The catalog's history (migration 0012): every change has a random id,
// the names a change dropped are kept a while, and an admin may adopt the
// catalog as it stands (llmgw gc --trust).

// HistoryLen is how many recent changes the catalog's answer lists: a
// node that last trusted the catalog this many changes ago, or more, no
// longer finds its anchor and needs an admin's `llmgw gc --trust`.
const HistoryLen = 256

// droppedFor is how long a dropped name is kept; droppedMax bounds them.
const (
	droppedFor = 30 * 24 * time.Hour
	droppedMax = 4096
)

func newChangeID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// changed records one change to the catalog in tx: the generation goes up
// by one, the change gets its id, and names are the cache names it
// dropped from model (recorded) and wanted (forgotten as dropped).
func changed(ctx context.Context, tx *sql.Tx, now time.Time, model string, dropped, wanted []string) error {
	if _, err := tx.ExecContext(ctx, `UPDATE catalog_identity SET generation = generation + 1`); err != nil {
		return fmt.Errorf("catalog generation: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO catalog_changes (generation, change, at)
		SELECT generation, ?, ? FROM catalog_identity`, newChangeID(), nanos(now)); err != nil {
		return fmt.Errorf("catalog history: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog_changes WHERE generation <= (SELECT generation FROM catalog_identity) - ?`, HistoryLen); err != nil {
		return fmt.Errorf("catalog history: %w", err)
	}
	for _, n := range wanted {
		if _, err := tx.ExecContext(ctx, `DELETE FROM catalog_dropped WHERE name = ?`, n); err != nil {
			return fmt.Errorf("catalog dropped names: %w", err)
		}
	}
	for _, n := range dropped {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO catalog_dropped (name, model, at) VALUES (?, ?, ?)`, n, model, nanos(now)); err != nil {
			return fmt.Errorf("catalog dropped names: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog_dropped WHERE at < ? OR name IN
		(SELECT name FROM catalog_dropped ORDER BY at DESC LIMIT -1 OFFSET ?)`, nanos(now.Add(-droppedFor)), droppedMax); err != nil {
		return fmt.Errorf("catalog dropped names: %w", err)
	}
	return nil
}

// cacheNames are the cache names m's remote sources land under.
func cacheNames(m api.Model) map[string]bool {
	out := map[string]bool{}
	for name := range catalog.WantedCacheNames([]catalog.Model{m}) {
		out[name] = true
	}
	return out
}

// CatalogHistory is the catalog's recent change ids, newest first, the
// names recent changes dropped (cache name → model), and the change an
// admin last adopted with when.
func (db *DB) CatalogHistory(ctx context.Context) (history []string, dropped map[string]string, trusted string, trustedAt time.Time, err error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT change FROM catalog_changes ORDER BY generation DESC LIMIT ?`, HistoryLen)
	if err != nil {
		return nil, nil, "", time.Time{}, fmt.Errorf("catalog history: %w", err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return nil, nil, "", time.Time{}, err
		}
		history = append(history, c)
	}
	rows.Close()
	dropped = map[string]string{}
	rows, err = db.cr().QueryContext(ctx, `SELECT name, model FROM catalog_dropped`)
	if err != nil {
		return nil, nil, "", time.Time{}, fmt.Errorf("catalog dropped names: %w", err)
	}
	for rows.Next() {
		var n, m string
		if err := rows.Scan(&n, &m); err != nil {
			rows.Close()
			return nil, nil, "", time.Time{}, err
		}
		dropped[n] = m
	}
	rows.Close()
	var at int64
	err = db.cr().QueryRowContext(ctx, `SELECT change, at FROM catalog_trust`).Scan(&trusted, &at)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, nil, "", time.Time{}, fmt.Errorf("catalog trust: %w", err)
	}
	return history, dropped, trusted, fromNanos(at), nil
}

// TrustCatalog records that an admin adopted the catalog as it stands
// now (llmgw gc --trust), and returns the change adopted.
func (db *DB) TrustCatalog(ctx context.Context, now time.Time) (string, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("trust catalog: %w", err)
	}
	defer tx.Rollback()
	var change string
	if err := tx.QueryRowContext(ctx, `SELECT c.change FROM catalog_changes c JOIN catalog_identity i ON c.generation = i.generation`).Scan(&change); err != nil {
		return "", fmt.Errorf("trust catalog: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO catalog_trust (one, change, at) VALUES (1, ?, ?)`, change, nanos(now)); err != nil {
		return "", fmt.Errorf("trust catalog: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("trust catalog: %w", err)
	}
	db.committed()
	return change, nil
}
