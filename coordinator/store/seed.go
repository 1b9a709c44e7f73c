package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
)

// Seed requests (llmgw seed): kept so that a coordinator restart does not
// forget which nodes it was asking, and so that `llmgw seed` can follow a
// request to its end. The coordinator decides; this only stores.

// seedKeep is how long seed requests are kept after they were made, and
// seedKeepMax how many at most: enough to look one up the next morning, few
// enough that the tables stay small whatever an admin script does.
const (
	seedKeep    = 7 * 24 * time.Hour
	seedKeepMax = 1000
)

// CreateSeed records a seed request: st's nodes in state api.SeedHeld are
// recorded as held (never asked), every other one as asked. Requests older
// than a week, and all but the newest seedKeepMax, are dropped.
func (db *DB) CreateSeed(ctx context.Context, st api.SeedStatus) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("seed request: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM seed_requests WHERE created < ?
		OR id NOT IN (SELECT id FROM seed_requests ORDER BY created DESC, id LIMIT ?)`,
		nanos(st.Created.Add(-seedKeep)), seedKeepMax-1); err != nil {
		return fmt.Errorf("seed request: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO seed_requests (id, model, fabric, copies, created, deadline, note) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		st.ID, st.Model, st.Fabric, st.Copies, nanos(st.Created), nanos(st.Deadline), st.Note); err != nil {
		return fmt.Errorf("seed request %s: %w", st.ID, err)
	}
	for _, n := range st.Nodes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO seed_asks (request, node, held) VALUES (?, ?, ?)`,
			st.ID, n.Node, b2i(n.State == api.SeedHeld)); err != nil {
			return fmt.Errorf("seed request %s for %s: %w", st.ID, n.Node, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("seed request %s: %w", st.ID, err)
	}
	db.committed()
	return nil
}

// HandSeed records that request id first reached node at at; later calls
// change nothing. It wraps ErrNotFound when the request does not ask node.
func (db *DB) HandSeed(ctx context.Context, id, node string, at time.Time) error {
	return db.markSeed(ctx, "handed", id, node, at)
}

// DoneSeed records that node first reported holding request id's model at
// at; later calls change nothing. It wraps ErrNotFound when the request
// does not ask node.
func (db *DB) DoneSeed(ctx context.Context, id, node string, at time.Time) error {
	return db.markSeed(ctx, "done", id, node, at)
}

func (db *DB) markSeed(ctx context.Context, column, id, node string, at time.Time) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	// column is one of two constants, never from a request.
	res, err := db.cw().ExecContext(ctx, `UPDATE seed_asks SET `+column+` = CASE WHEN `+column+` = 0 THEN ? ELSE `+column+` END
		WHERE request = ? AND node = ? AND held = 0`, nanos(at), id, node)
	if err != nil {
		return fmt.Errorf("seed request %s for %s: %w", id, node, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("seed request %s does not ask node %s: %w", id, node, ErrNotFound)
	}
	db.committed()
	return nil
}

// Seed returns request id with every node it names, each in state
// api.SeedHeld, api.SeedDone or api.SeedAsked (the store knows no clock:
// whether an ask expired is the caller's to say). It wraps ErrNotFound when
// there is no such request.
func (db *DB) Seed(ctx context.Context, id string) (api.SeedStatus, error) {
	var st api.SeedStatus
	var created, deadline int64
	err := db.cr().QueryRowContext(ctx, `SELECT id, model, fabric, copies, created, deadline, note FROM seed_requests WHERE id = ?`, id).
		Scan(&st.ID, &st.Model, &st.Fabric, &st.Copies, &created, &deadline, &st.Note)
	if errors.Is(err, sql.ErrNoRows) {
		return st, fmt.Errorf("seed request %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("seed request %s: %w", id, err)
	}
	st.Created, st.Deadline = fromNanos(created), fromNanos(deadline)
	rows, err := db.cr().QueryContext(ctx, `SELECT node, held, handed, done FROM seed_asks WHERE request = ? ORDER BY node`, id)
	if err != nil {
		return st, fmt.Errorf("seed request %s: %w", id, err)
	}
	defer rows.Close()
	st.Nodes = []api.SeedNode{}
	for rows.Next() {
		var n api.SeedNode
		var held bool
		var handed, done int64
		if err := rows.Scan(&n.Node, &held, &handed, &done); err != nil {
			return st, fmt.Errorf("seed request %s: %w", id, err)
		}
		n.Handed, n.Done = fromNanos(handed), fromNanos(done)
		switch {
		case held:
			n.State = api.SeedHeld
		case done != 0:
			n.State = api.SeedDone
		default:
			n.State = api.SeedAsked
		}
		st.Nodes = append(st.Nodes, n)
	}
	return st, rows.Err()
}

// PendingSeeds returns the requests whose deadline is after now, oldest
// first, each with only its nodes still asked (not held, not done): what
// the coordinator still hands out, for instance after a restart.
func (db *DB) PendingSeeds(ctx context.Context, now time.Time) ([]api.SeedStatus, error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT r.id, r.model, r.fabric, r.copies, r.created, r.deadline, r.note, a.node, a.handed
		FROM seed_requests r JOIN seed_asks a ON a.request = r.id
		WHERE r.deadline > ? AND a.held = 0 AND a.done = 0 ORDER BY r.created, r.id, a.node`, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("pending seed requests: %w", err)
	}
	defer rows.Close()
	var out []api.SeedStatus
	for rows.Next() {
		var st api.SeedStatus
		var created, deadline, handed int64
		var node string
		if err := rows.Scan(&st.ID, &st.Model, &st.Fabric, &st.Copies, &created, &deadline, &st.Note, &node, &handed); err != nil {
			return nil, fmt.Errorf("pending seed requests: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].ID != st.ID {
			st.Created, st.Deadline = fromNanos(created), fromNanos(deadline)
			out = append(out, st)
		}
		last := &out[len(out)-1]
		last.Nodes = append(last.Nodes, api.SeedNode{Node: node, State: api.SeedAsked, Handed: fromNanos(handed)})
	}
	return out, rows.Err()
}
