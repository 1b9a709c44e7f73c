package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
)

// GCResult is what a node did with one file a gc looked at: listed it (the
// default), removed it (collect), kept it for now, or refused, with its
// reason. The node decides; this is its answer, kept for `llmgw gc` and
// status.
type GCResult struct {
	Node string
	// Name is the name as the node found it or was asked it, verbatim (a
	// refused "../etc/passwd" too); empty means Path.
	Name string
	// Path is where the file is on the node, when Name is a plain name.
	Path string
	// Request is the gc request answered; empty for a gc the node ran on
	// its own (the Epilog's).
	Request string
	Asked   bool
	Action  string // "listed", "removed", "kept", "refused" or "failed"
	Reason  string
	Size    int64
	Time    time.Time
}

// PutGCResults replaces what is stored of node's last gc answer.
func (db *DB) PutGCResults(ctx context.Context, node string, results []GCResult) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	defer tx.Rollback()
	if err := putGCResults(ctx, tx, node, results); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	db.committed()
	return nil
}

func putGCResults(ctx context.Context, tx *sql.Tx, node string, results []GCResult) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM gc_results WHERE node = ?`, node); err != nil {
		return fmt.Errorf("gc results of %s: %w", node, err)
	}
	for _, r := range results {
		name := r.Name
		if name == "" {
			name = r.Path
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_results (node, name, path, request, asked, action, reason, bytes, time)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, node, name, r.Path, r.Request, b2i(r.Asked), r.Action, r.Reason, r.Size, nanos(r.Time)); err != nil {
			return fmt.Errorf("gc result %q on %s: %w", name, node, err)
		}
	}
	return nil
}

// GCResults returns the last gc answers of every node (node "") or of one, in
// node and name order.
func (db *DB) GCResults(ctx context.Context, node string) ([]GCResult, error) {
	return db.gcResults(ctx, `?1 = '' OR node = ?1`, node)
}

func (db *DB) gcResults(ctx context.Context, where string, arg string) ([]GCResult, error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT node, name, path, request, asked, action, reason, bytes, time FROM gc_results
		WHERE `+where+` ORDER BY node, name`, arg)
	if err != nil {
		return nil, fmt.Errorf("gc results: %w", err)
	}
	defer rows.Close()
	out := []GCResult{}
	for rows.Next() {
		var r GCResult
		var t int64
		if err := rows.Scan(&r.Node, &r.Name, &r.Path, &r.Request, &r.Asked, &r.Action, &r.Reason, &r.Size, &t); err != nil {
			return nil, fmt.Errorf("gc results: %w", err)
		}
		r.Time = fromNanos(t)
		out = append(out, r)
	}
	return out, rows.Err()
}

// gcKeep is how long finished gc requests are kept: long enough to look
// one up the next morning, short enough that the table stays small.
const gcKeep = 7 * 24 * time.Hour

// CreateGC records a gc request asking st.Nodes (their names; the rest of
// each GCNode is ignored). Requests older than a week are dropped.
func (db *DB) CreateGC(ctx context.Context, st api.GCStatus) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("gc request: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM gc_requests WHERE created < ?`, nanos(st.Created.Add(-gcKeep))); err != nil {
		return fmt.Errorf("gc request: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gc_requests (id, collect, node, created, deadline, force, trust) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		st.ID, b2i(st.Collect), st.Node, nanos(st.Created), nanos(st.Deadline), b2i(st.Force), b2i(st.Trust)); err != nil {
		return fmt.Errorf("gc request %s: %w", st.ID, err)
	}
	for _, n := range st.Nodes {
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_asks (request, node) VALUES (?, ?)`, st.ID, n.Node); err != nil {
			return fmt.Errorf("gc request %s for %s: %w", st.ID, n.Node, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("gc request %s: %w", st.ID, err)
	}
	db.committed()
	return nil
}

// HandGC records that request id was handed to node, asking it to remove
// asked. It wraps ErrNotFound when the request does not ask that node.
func (db *DB) HandGC(ctx context.Context, id, node string, asked []string, at time.Time) error {
	if asked == nil {
		asked = []string{}
	}
	b, err := json.Marshal(asked)
	if err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	res, err := db.cw().ExecContext(ctx, `UPDATE gc_asks SET handed = ?, asked = ? WHERE request = ? AND node = ?`, nanos(at), string(b), id, node)
	if err != nil {
		return fmt.Errorf("gc request %s for %s: %w", id, node, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("gc request %s for %s: %w", id, node, ErrNotFound)
	}
	db.committed()
	return nil
}

// AnswerGC stores node's answer to request id: the summary with the
// request, the files as the node's last gc results. It wraps ErrNotFound
// when the request does not exist or does not ask that node, and
// ErrConflict when the node already answered it.
func (db *DB) AnswerGC(ctx context.Context, id string, a api.GCAnswer, at time.Time) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("gc answer: %w", err)
	}
	defer tx.Rollback()
	var answered int64
	err = tx.QueryRowContext(ctx, `SELECT answered FROM gc_asks WHERE request = ? AND node = ?`, id, a.Node).Scan(&answered)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("gc request %s does not ask node %s: %w", id, a.Node, ErrNotFound)
	case err != nil:
		return fmt.Errorf("gc answer of %s: %w", a.Node, err)
	case answered != 0:
		return fmt.Errorf("node %s already answered gc request %s: %w", a.Node, id, ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE gc_asks SET answered = ?, cache_dir = ?, freed = ?, held = ? WHERE request = ? AND node = ?`,
		nanos(at), a.CacheDir, a.Freed, a.Held, id, a.Node); err != nil {
		return fmt.Errorf("gc answer of %s: %w", a.Node, err)
	}
	results := make([]GCResult, 0, len(a.Files))
	for _, f := range a.Files {
		results = append(results, GCResult{Node: a.Node, Name: f.Name, Path: f.Path, Request: id, Asked: f.Asked,
			Action: f.Action, Reason: f.Reason, Size: f.Size, Time: at})
	}
	if err := putGCResults(ctx, tx, a.Node, results); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("gc answer of %s: %w", a.Node, err)
	}
	db.committed()
	return nil
}

// GC returns request id with every node it asks and the answers so far. A
// node's files are its last gc results; when a later gc replaced them, the
// answer keeps its summary and loses its files. It wraps ErrNotFound when
// there is no such request.
func (db *DB) GC(ctx context.Context, id string) (api.GCStatus, error) {
	var st api.GCStatus
	var created, deadline int64
	err := db.cr().QueryRowContext(ctx, `SELECT id, collect, node, created, deadline, force, trust FROM gc_requests WHERE id = ?`, id).
		Scan(&st.ID, &st.Collect, &st.Node, &created, &deadline, &st.Force, &st.Trust)
	if errors.Is(err, sql.ErrNoRows) {
		return st, fmt.Errorf("gc request %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("gc request %s: %w", id, err)
	}
	st.Created, st.Deadline = fromNanos(created), fromNanos(deadline)
	st.Nodes, err = db.gcAsks(ctx, id, st.Collect)
	if err != nil {
		return st, err
	}
	results, err := db.gcResults(ctx, `request = ?1`, id)
	if err != nil {
		return st, err
	}
	byNode := map[string]*api.GCAnswer{}
	for i := range st.Nodes {
		if a := st.Nodes[i].Answer; a != nil {
			byNode[st.Nodes[i].Node] = a
		}
	}
	for _, r := range results {
		if a := byNode[r.Node]; a != nil {
			a.Files = append(a.Files, api.GCFile{Name: r.Name, Path: r.Path, Asked: r.Asked, Action: r.Action, Reason: r.Reason, Size: r.Size})
		}
	}
	return st, nil
}

func (db *DB) gcAsks(ctx context.Context, id string, collect bool) ([]api.GCNode, error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT node, handed, asked, answered, cache_dir, freed, held FROM gc_asks
		WHERE request = ? ORDER BY node`, id)
	if err != nil {
		return nil, fmt.Errorf("gc request %s: %w", id, err)
	}
	defer rows.Close()
	out := []api.GCNode{}
	for rows.Next() {
		var n api.GCNode
		var handed, answered, freed int64
		var asked, cacheDir, held string
		if err := rows.Scan(&n.Node, &handed, &asked, &answered, &cacheDir, &freed, &held); err != nil {
			return nil, fmt.Errorf("gc request %s: %w", id, err)
		}
		n.Handed, n.Answered = fromNanos(handed), fromNanos(answered)
		if err := json.Unmarshal([]byte(asked), &n.Asked); err != nil {
			return nil, fmt.Errorf("gc request %s, node %s: %w", id, n.Node, err)
		}
		if answered != 0 {
			n.Answer = &api.GCAnswer{Node: n.Node, CacheDir: cacheDir, Collect: collect, Freed: freed, Held: held, Files: []api.GCFile{}}
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// PendingGC returns the requests whose deadline is after now, each with only
// the nodes not yet handed it: what the coordinator still has to hand out,
// for instance after a restart.
func (db *DB) PendingGC(ctx context.Context, now time.Time) ([]api.GCStatus, error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT r.id, r.collect, r.node, r.created, r.deadline, r.force, r.trust, a.node
		FROM gc_requests r JOIN gc_asks a ON a.request = r.id
		WHERE r.deadline > ? AND a.handed = 0 ORDER BY r.created, r.id, a.node`, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("pending gc requests: %w", err)
	}
	defer rows.Close()
	var out []api.GCStatus
	for rows.Next() {
		var st api.GCStatus
		var created, deadline int64
		var node string
		if err := rows.Scan(&st.ID, &st.Collect, &st.Node, &created, &deadline, &st.Force, &st.Trust, &node); err != nil {
			return nil, fmt.Errorf("pending gc requests: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].ID != st.ID {
			st.Created, st.Deadline = fromNanos(created), fromNanos(deadline)
			out = append(out, st)
		}
		last := &out[len(out)-1]
		last.Nodes = append(last.Nodes, api.GCNode{Node: node})
	}
	return out, rows.Err()
}
