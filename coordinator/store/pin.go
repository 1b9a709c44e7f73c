package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
)

// PinConflict is the error Pin returns when the entry is already pinned to
// other bytes. Test for it with errors.As.
type PinConflict struct {
	Model api.Model // as stored, with its pin
	// Source and Pinned are the pinned source and its pin: the model's
	// own, or, for a model of several files, the file's.
	Source     string
	Pinned     string
	PinnedETag string // how the origin named the pinned bytes, if it did
	Offered    string // the digest that was refused
}

func (e *PinConflict) Error() string {
	return fmt.Sprintf("model %s is pinned to sha256 %s for %s, not %s", e.Model.Name, e.Pinned, e.Source, e.Offered)
}

// Pin records sha256 (and the origin's validator etag) as the bytes of the
// catalog entry whose source is source, when the entry declares no sha256
// and has no pin yet, and returns the entry as it then stands. A pin equal
// to the stored one changes nothing; another one is a *PinConflict, since
// only an admin (Unpin) may move a pin. A source that is no entry's wraps
// ErrNotFound.
func (db *DB) Pin(ctx context.Context, source, sha256, etag, node string, now time.Time) (api.Model, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return api.Model{}, fmt.Errorf("pin %s: %w", source, err)
	}
	defer tx.Rollback()
	if m, ok, err := pinFile(ctx, tx, source, sha256, etag, node, now); ok || err != nil {
		if err == nil {
			if err = tx.Commit(); err == nil {
				db.committed()
			}
		}
		return m, err
	}
	m, err := scanModel(tx.QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE source = ?`, source))
	if err == sql.ErrNoRows {
		return api.Model{}, fmt.Errorf("source %s is in no catalog entry: %w", source, ErrNotFound)
	}
	if err != nil {
		return api.Model{}, fmt.Errorf("pin %s: %w", source, err)
	}
	if err := readHub(ctx, tx, &m); err != nil {
		return api.Model{}, err
	}
	if m.SHA256 != "" || m.IsHub() {
		// A declared digest is what every fetch verifies, and a Hub
		// model's commit and the Hub's digests pin it: a pin would only
		// shadow them.
		return m, nil
	}
	if err := readPin(ctx, tx, &m); err != nil {
		return api.Model{}, err
	}
	switch {
	case m.Pinned == sha256:
		return m, nil
	case m.Pinned != "":
		return api.Model{}, &PinConflict{Model: m, Source: m.Source, Pinned: m.Pinned, PinnedETag: m.PinnedETag, Offered: sha256}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO pins (name, source, sha256, etag, node, pinned) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET source = excluded.source, sha256 = excluded.sha256,
			etag = excluded.etag, node = excluded.node, pinned = excluded.pinned`,
		m.Name, m.Source, sha256, etag, node, nanos(now))
	if err != nil {
		return api.Model{}, fmt.Errorf("pin %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return api.Model{}, fmt.Errorf("pin %s: %w", m.Name, err)
	}
	db.committed()
	m.Pinned, m.PinnedETag = sha256, etag
	return m, nil
}

// Unpin forgets the pin of the named entry, so that the next verified
// fetch pins again: how an admin accepts bytes the origin changed. An entry
// without a pin is left as it is; a name that is no entry wraps
// ErrNotFound.
func (db *DB) Unpin(ctx context.Context, name string) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM catalog WHERE name = ?`, name).Scan(&one); err == sql.ErrNoRows {
		return fmt.Errorf("model %s: %w", name, ErrNotFound)
	} else if err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM pins WHERE name = ?`, name); err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE catalog_files SET pinned_sha256 = '', pinned_etag = '', pinned_node = '', pinned = 0 WHERE name = ?`, name); err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	// The chunk digests are of the pinned bytes: they go with the pin.
	if _, err := tx.ExecContext(ctx, `DELETE FROM chunk_sums WHERE name = ?`, name); err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("repin %s: %w", name, err)
	}
	db.committed()
	return nil
}

type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// pinFile is Pin of a file of a model of several files
// (migrations/0007_catalog_files.sql): each file is pinned on its own. ok
// is false when source is no such file; the changes, if any, are made in
// tx, for the caller to commit.
func pinFile(ctx context.Context, tx *sql.Tx, source, sha256, etag, node string, now time.Time) (api.Model, bool, error) {
	var name, declared, pinned, pinnedETag string
	err := tx.QueryRowContext(ctx, `SELECT name, sha256, pinned_sha256, pinned_etag FROM catalog_files WHERE source = ?`, source).Scan(&name, &declared, &pinned, &pinnedETag)
	if err == sql.ErrNoRows {
		return api.Model{}, false, nil
	}
	if err != nil {
		return api.Model{}, true, fmt.Errorf("pin %s: %w", source, err)
	}
	read := func() (api.Model, error) {
		m, err := scanModel(tx.QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE name = ?`, name))
		if err == nil {
			err = readFiles(ctx, tx, &m)
		}
		if err != nil {
			return api.Model{}, fmt.Errorf("pin %s: %w", source, err)
		}
		return m, nil
	}
	switch {
	case declared != "", pinned == sha256:
		m, err := read()
		return m, true, err
	case pinned != "":
		m, err := read()
		if err != nil {
			return api.Model{}, true, err
		}
		return api.Model{}, true, &PinConflict{Model: m, Source: source, Pinned: pinned, PinnedETag: pinnedETag, Offered: sha256}
	}
	_, err = tx.ExecContext(ctx, `UPDATE catalog_files SET pinned_sha256 = ?, pinned_etag = ?, pinned_node = ?, pinned = ? WHERE source = ?`,
		sha256, etag, node, nanos(now), source)
	if err != nil {
		return api.Model{}, true, fmt.Errorf("pin %s: %w", source, err)
	}
	m, err := read()
	return m, true, err
}

// readPin fills m's pin, if it has one for its current source.
func readPin(ctx context.Context, q rowQuerier, m *api.Model) error {
	err := q.QueryRowContext(ctx, `SELECT sha256, etag FROM pins WHERE name = ? AND source = ?`, m.Name, m.Source).
		Scan(&m.Pinned, &m.PinnedETag)
	if err != nil && err != sql.ErrNoRows {
		return fmt.Errorf("pin of model %s: %w", m.Name, err)
	}
	return nil
}

// addPins fills the pins of models, a whole catalog read by q.
func addPins(ctx context.Context, q querier, models []api.Model) error {
	rows, err := q.QueryContext(ctx, `SELECT name, source, sha256, etag FROM pins`)
	if err != nil {
		return fmt.Errorf("list pins: %w", err)
	}
	defer rows.Close()
	type pin struct{ source, sha256, etag string }
	pins := map[string]pin{}
	for rows.Next() {
		var name string
		var p pin
		if err := rows.Scan(&name, &p.source, &p.sha256, &p.etag); err != nil {
			return fmt.Errorf("list pins: %w", err)
		}
		pins[name] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list pins: %w", err)
	}
	for i := range models {
		// A pin is of the bytes of one source: an entry given a new
		// source starts unpinned.
		// A model of several files has its pins on its files.
		if p, ok := pins[models[i].Name]; ok && p.source == models[i].Source && models[i].SHA256 == "" && !models[i].IsSet() && !models[i].IsHub() {
			models[i].Pinned, models[i].PinnedETag = p.sha256, p.etag
		}
	}
	return nil
}
