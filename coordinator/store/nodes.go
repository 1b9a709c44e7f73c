package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Node is a node as last reported: who it is, its cache, and the reported
// weights that are catalog models (its holdings).
type Node struct {
	Name       string
	Fabric     string
	Looked     bool
	CacheDir   string
	CacheFree  int64
	CacheTotal int64
	// HFCacheFree and HFCacheTotal are the room of its Hugging Face cache
	// when that is on another filesystem (api.Report.HFCache); 0 total
	// when none was reported.
	HFCacheFree  int64
	HFCacheTotal int64
	// GPUMemory is the node's total GPU memory in bytes, 0 when unknown.
	GPUMemory    int64
	AgentVersion string
	// PeerAddr is the node's chunk server address (swarm peers), "" none.
	PeerAddr string
	// Received is when the coordinator stored the report (its own clock).
	Received   time.Time
	ReportTime time.Time // the agent's clock
	ReportID   string
	Started    time.Time
	Seq        int64
	Errors     []string
	// GCHeld is why the node's gc is held by the catalog (api.Report), and
	// GCHeldSince since when; empty while it trusts the catalog.
	GCHeld      string
	GCHeldSince time.Time
	// Holdings are the reported weights that match a catalog entry,
	// complete or not, in path order.
	Holdings []Holding
	Fetches  []api.Fetch
}

// Holding is one reported weight that is a catalog model. It is the
// presence model's type, so the coordinator's view takes a node's holdings
// as the store built them: a copy of half a million holdings made every
// reload of a big cluster twice as slow.
type Holding = placement.Holding

// nodeMeta is what ingest needs to know of a node without reading its row.
type nodeMeta struct {
	started, seq int64
	received     int64
	hash         [16]byte
	fetches      bool
}

type stmts struct {
	upsertNode, putPresence, delFetches, insFetch *sql.Stmt
}

func (s *stmts) close() {
	for _, st := range []*sql.Stmt{s.upsertNode, s.putPresence, s.delFetches, s.insFetch} {
		if st != nil {
			st.Close()
		}
	}
}

func prepare(ctx context.Context, w *sql.DB) (stmts, error) {
	var err error
	p := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = w.PrepareContext(ctx, q)
		return st
	}
	s := stmts{
		upsertNode: p(`INSERT INTO nodes (name, fabric, looked, cache_dir, cache_free_bytes, cache_total_bytes,
				agent_version, received, report_time, report_id, started, seq, weights_hash, errors, gpu_memory_bytes,
				peer_addr, gc_held, gc_held_since, hf_cache_free_bytes, hf_cache_total_bytes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET fabric = excluded.fabric, looked = excluded.looked,
				cache_dir = excluded.cache_dir, cache_free_bytes = excluded.cache_free_bytes,
				cache_total_bytes = excluded.cache_total_bytes, agent_version = excluded.agent_version,
				received = excluded.received, report_time = excluded.report_time,
				report_id = excluded.report_id, started = excluded.started, seq = excluded.seq,
				weights_hash = excluded.weights_hash, errors = excluded.errors,
				gpu_memory_bytes = excluded.gpu_memory_bytes, peer_addr = excluded.peer_addr,
				gc_held = excluded.gc_held, gc_held_since = excluded.gc_held_since,
				hf_cache_free_bytes = excluded.hf_cache_free_bytes,
				hf_cache_total_bytes = excluded.hf_cache_total_bytes`),
		putPresence: p(`INSERT INTO presence (node, weights) VALUES (?, ?)
			ON CONFLICT (node) DO UPDATE SET weights = excluded.weights`),
		delFetches: p(`DELETE FROM fetches WHERE node = ?`),
		insFetch: p(`INSERT INTO fetches (node, source, bytes_done, bytes_total, rate, started, progressed)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
	}
	if err != nil {
		s.close()
	}
	return s, err
}

func (db *DB) loadMeta(ctx context.Context) error {
	rows, err := db.cw().QueryContext(ctx, `SELECT n.name, n.started, n.seq, n.received, n.weights_hash,
		EXISTS (SELECT 1 FROM fetches f WHERE f.node = n.name) FROM nodes n`)
	if err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var m nodeMeta
		var hash []byte
		if err := rows.Scan(&name, &m.started, &m.seq, &m.received, &hash, &m.fetches); err != nil {
			return fmt.Errorf("load nodes: %w", err)
		}
		copy(m.hash[:], hash)
		db.meta[name] = m
	}
	return rows.Err()
}

// Outcome is what became of one report given to Ingest.
type Outcome struct {
	// Stored is false when the report was dropped because one at least as
	// new, by (Started, Seq), was already stored for its node, or because
	// NeedWeights.
	Stored bool
	// NeedWeights is set for an Incoming with SameWeights for a node the
	// store has no weights of: send it again with its weights.
	NeedWeights bool
	// Node is the node as stored, when Stored. With SameWeights its
	// Holdings are nil: they are what they were.
	Node *Node
}

// Incoming is one report for IngestBatch.
type Incoming struct {
	Report *api.Report
	// SameWeights says the report's weights and cache dir are those of the
	// node's last stored report, and Report.Weights is not filled in: the
	// caller saw the same bytes and skipped decoding them. Presence is left
	// as it is.
	SameWeights bool
}

// Ingest stores reports in one transaction, in order, and says what became
// of each. Each stored report replaces everything known of its node: its
// presence rows, its fetches, its cache figures. The caller validates the
// reports (node names, paths, bounds); now is the receive time.
//
// One transaction for many reports is what makes ingest fast: a commit is
// the expensive part of a write, and agents of a large cluster report
// continuously. Presence rows are rewritten only when the weights differ
// from what is stored (a fingerprint kept on the node row says so), which
// is almost never between two reports.
//
// On error nothing of the batch is stored.
func (db *DB) Ingest(ctx context.Context, reports []*api.Report, now time.Time) ([]Outcome, error) {
	in := make([]Incoming, len(reports))
	for i, r := range reports {
		in[i].Report = r
	}
	return db.IngestBatch(ctx, in, now)
}

// IngestBatch is Ingest for reports some of which carry SameWeights.
func (db *DB) IngestBatch(ctx context.Context, reports []Incoming, now time.Time) ([]Outcome, error) {
	// Looked at before sqlite touches the files: see freeze.go.
	if err := db.checkFrozen(); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	defer tx.Rollback()
	st := stmts{
		upsertNode:  tx.StmtContext(ctx, db.st().upsertNode),
		putPresence: tx.StmtContext(ctx, db.st().putPresence),
		delFetches:  tx.StmtContext(ctx, db.st().delFetches),
		insFetch:    tx.StmtContext(ctx, db.st().insFetch),
	}
	out := make([]Outcome, len(reports))
	// Changes to meta apply only once the transaction commits.
	pending := make(map[string]nodeMeta, len(reports))
	recv := nanos(now)
	for i, in := range reports {
		r := in.Report
		prev, known := pending[r.Node]
		if !known {
			prev, known = db.meta[r.Node]
		}
		started := nanos(r.Started)
		if known && (started < prev.started || started == prev.started && r.Seq <= prev.seq) &&
			!(db.ReplaceAfter > 0 && recv-prev.received > int64(db.ReplaceAfter)) {
			continue
		}
		if in.SameWeights && !known {
			out[i] = Outcome{NeedWeights: true}
			continue
		}
		n, hash, err := db.store(ctx, &st, r, in.SameWeights, recv, prev, known)
		if err != nil {
			return nil, fmt.Errorf("ingest report %s from %s: %w", r.ID, r.Node, err)
		}
		pending[r.Node] = nodeMeta{started: started, seq: r.Seq, received: recv, hash: hash, fetches: len(r.Fetches) > 0}
		out[i] = Outcome{Stored: true, Node: n}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	db.committed()
	for name, m := range pending {
		db.meta[name] = m
	}
	return out, nil
}

func (db *DB) store(ctx context.Context, st *stmts, r *api.Report, same bool, recv int64, prev nodeMeta, known bool) (*Node, [16]byte, error) {
	cacheDir := ""
	if r.Cache.Dir != "" {
		cacheDir = catalog.CleanPath(r.Cache.Dir)
	}
	n := &Node{
		Name: r.Node, Fabric: r.Fabric, Looked: r.Looked, CacheDir: cacheDir,
		CacheFree: r.Cache.FreeBytes, CacheTotal: r.Cache.TotalBytes, GPUMemory: r.GPUMemory, AgentVersion: r.AgentVersion, PeerAddr: r.PeerAddr,
		Received: fromNanos(recv), ReportTime: r.Time.UTC(), ReportID: r.ID, Started: r.Started.UTC(), Seq: r.Seq,
		Errors: r.Errors, Fetches: r.Fetches, GCHeld: r.GCHeld, GCHeldSince: r.GCHeldSince.UTC(),
	}
	if r.HFCache != nil {
		n.HFCacheFree, n.HFCacheTotal = r.HFCache.FreeBytes, r.HFCache.TotalBytes
	}
	// Clean paths once so that matching and the fingerprint see one
	// spelling of each. Path order makes holdings, the stored array and
	// the fingerprint the same however the agent listed them. Agents send
	// clean paths in order, so the report's own slice is usually used as
	// it is; it is copied before anything would change it.
	ws := r.Weights
	copied := false
	for i := range ws {
		if p := catalog.CleanPath(ws[i].Path); p != ws[i].Path {
			if !copied {
				ws, copied = slices.Clone(ws), true
			}
			ws[i].Path = p
		}
	}
	byPath := func(a, b api.Weight) int { return strings.Compare(a.Path, b.Path) }
	if !slices.IsSortedFunc(ws, byPath) {
		if !copied {
			ws = slices.Clone(ws)
		}
		slices.SortFunc(ws, byPath)
	}
	models := make([]string, len(ws))
	held := 0
	for i := range ws {
		models[i] = db.match.model(cacheDir, &ws[i])
		if models[i] != "" {
			held++
		}
	}
	if held > 0 {
		n.Holdings = make([]Holding, 0, held)
	}
	// The fingerprint's input is built in one buffer and hashed once: a
	// Write per field cost an allocation each.
	b := append(db.buf[:0], cacheDir...)
	for i, w := range ws {
		if models[i] != "" {
			n.Holdings = append(n.Holdings, Holding{Model: models[i], Path: w.Path, Size: w.Size,
				Shared: w.Shared, Complete: w.Complete, Problem: w.Problem})
		}
		b = append(b, 0)
		b = append(b, w.Path...)
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint64(b, uint64(w.Size))
		b = append(b, b2i(w.Shared), b2i(w.Complete))
		b = append(b, w.Problem...)
		b = append(b, 0)
		b = append(b, w.ModelID...)
		b = append(b, 0)
		b = append(b, w.Revision...)
	}
	db.buf = b
	sum := sha256.Sum256(b)
	var hash [16]byte
	copy(hash[:], sum[:])
	if same {
		hash = prev.hash
	}

	errs := ""
	if len(r.Errors) > 0 {
		b, _ := json.Marshal(r.Errors)
		errs = string(b)
	}
	if _, err := st.upsertNode.ExecContext(ctx, r.Node, r.Fabric, r.Looked, cacheDir, r.Cache.FreeBytes,
		r.Cache.TotalBytes, r.AgentVersion, recv, nanos(r.Time), r.ID, nanos(r.Started), r.Seq, hash[:], errs, r.GPUMemory,
		r.PeerAddr, r.GCHeld, nanos(r.GCHeldSince), n.HFCacheFree, n.HFCacheTotal); err != nil {
		return nil, hash, fmt.Errorf("node: %w", err)
	}
	if !known || hash != prev.hash {
		// The whole array, replacing the node's last one: one row whatever
		// the number of weights.
		db.buf = appendWeights(db.buf[:0], ws, models)
		if _, err := st.putPresence.ExecContext(ctx, r.Node, string(db.buf)); err != nil {
			return nil, hash, fmt.Errorf("presence: %w", err)
		}
	}
	if known && prev.fetches {
		if _, err := st.delFetches.ExecContext(ctx, r.Node); err != nil {
			return nil, hash, fmt.Errorf("fetches: %w", err)
		}
	}
	for _, f := range r.Fetches {
		if _, err := st.insFetch.ExecContext(ctx, r.Node, f.Source, f.Done, f.Total, f.Rate,
			nanos(f.Started), nanos(f.Progressed)); err != nil {
			return nil, hash, fmt.Errorf("fetch %s: %w", f.Source, err)
		}
	}
	return n, hash, nil
}

func b2i(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// Nodes returns every node as stored, with its holdings and fetches, in
// name order. The coordinator rebuilds its in-memory view from it at start
// and after a catalog change.
func (db *DB) Nodes(ctx context.Context) ([]*Node, error) {
	// One read transaction, so the three queries see one state.
	tx, err := db.cr().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT name, fabric, looked, cache_dir, cache_free_bytes, cache_total_bytes,
		agent_version, received, report_time, report_id, started, seq, errors, gpu_memory_bytes, peer_addr, gc_held, gc_held_since,
		hf_cache_free_bytes, hf_cache_total_bytes FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []*Node
	byName := map[string]*Node{}
	for rows.Next() {
		n := &Node{}
		var recv, rt, started, heldSince int64
		var errs string
		if err := rows.Scan(&n.Name, &n.Fabric, &n.Looked, &n.CacheDir, &n.CacheFree, &n.CacheTotal,
			&n.AgentVersion, &recv, &rt, &n.ReportID, &started, &n.Seq, &errs, &n.GPUMemory, &n.PeerAddr, &n.GCHeld, &heldSince,
			&n.HFCacheFree, &n.HFCacheTotal); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		n.Received, n.ReportTime, n.Started, n.GCHeldSince = fromNanos(recv), fromNanos(rt), fromNanos(started), fromNanos(heldSince)
		if errs != "" {
			if err := json.Unmarshal([]byte(errs), &n.Errors); err != nil {
				n.Errors = []string{errs}
			}
		}
		out = append(out, n)
		byName[n.Name] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}

	rows, err = tx.QueryContext(ctx, `SELECT node, weights FROM presence`)
	if err != nil {
		return nil, fmt.Errorf("list presence: %w", err)
	}
	in := interner{}
	var ps []Presence // reused for every node
	for rows.Next() {
		var node, arr string
		if err := rows.Scan(&node, &arr); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list presence: %w", err)
		}
		n := byName[node]
		if n == nil {
			continue
		}
		ps, err = decodeWeights(arr, in, ps)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("presence of %s: %w", node, err)
		}
		held := 0
		for _, p := range ps {
			if p.Model != "" {
				held++
			}
		}
		if held == 0 {
			continue
		}
		n.Holdings = make([]Holding, 0, held)
		for _, p := range ps {
			if p.Model != "" {
				n.Holdings = append(n.Holdings, Holding{Model: p.Model, Path: p.Path, Size: p.Size,
					Shared: p.Shared, Complete: p.Complete, Problem: p.Problem})
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list presence: %w", err)
	}

	rows, err = tx.QueryContext(ctx, `SELECT node, source, bytes_done, bytes_total, rate, started, progressed
		FROM fetches ORDER BY node, source`)
	if err != nil {
		return nil, fmt.Errorf("list fetches: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var node string
		var f api.Fetch
		var started, progressed int64
		if err := rows.Scan(&node, &f.Source, &f.Done, &f.Total, &f.Rate, &started, &progressed); err != nil {
			return nil, fmt.Errorf("list fetches: %w", err)
		}
		f.Started, f.Progressed = fromNanos(started), fromNanos(progressed)
		if n := byName[node]; n != nil {
			n.Fetches = append(n.Fetches, f)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list fetches: %w", err)
	}
	return out, nil
}

// Presence is one reported weight as stored, for operators and tests.
type Presence struct {
	Node     string
	Path     string
	Size     int64
	Shared   bool
	Complete bool
	Problem  string
	ModelID  string
	Revision string
	Model    string // "" when the weights are no catalog model
}

// NodePresence returns every reported weight of one node, in path order, or
// an error wrapping ErrNotFound when the node never reported.
func (db *DB) NodePresence(ctx context.Context, node string) ([]Presence, error) {
	var arr sql.NullString
	err := db.cr().QueryRowContext(ctx, `SELECT p.weights FROM nodes n LEFT JOIN presence p ON p.node = n.name
		WHERE n.name = ?`, node).Scan(&arr)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("node %s: %w", node, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("presence of %s: %w", node, err)
	}
	out := []Presence{}
	if arr.Valid {
		if out, err = decodeWeights(arr.String, nil, nil); err != nil {
			return nil, fmt.Errorf("presence of %s: %w", node, err)
		}
	}
	for i := range out {
		out[i].Node = node
	}
	slices.SortFunc(out, func(a, b Presence) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// DeleteNodes forgets nodes: their row, presence and fetches (by the
// foreign keys), and what the store remembers of their last report, so a
// node that comes back starts afresh. It returns the names that were
// stored; names that were not are skipped.
func (db *DB) DeleteNodes(ctx context.Context, names []string) ([]string, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("delete nodes: %w", err)
	}
	defer tx.Rollback()
	var gone []string
	for _, name := range names {
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE name = ?`, name)
		if err != nil {
			return nil, fmt.Errorf("delete node %s: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("delete nodes: %w", err)
	}
	db.committed()
	for _, name := range gone {
		delete(db.meta, name)
	}
	return gone, nil
}

// SetNodeToken makes hash (a token's sha256) node's token, replacing the
// one it had: making a new token is how a node's old one is revoked.
func (db *DB) SetNodeToken(ctx context.Context, node string, hash [32]byte, now time.Time) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	_, err := db.cw().ExecContext(ctx, `INSERT INTO node_tokens (node, sha256, created) VALUES (?, ?, ?)
		ON CONFLICT (node) DO UPDATE SET sha256 = excluded.sha256, created = excluded.created`, node, hash[:], nanos(now))
	if err != nil {
		return fmt.Errorf("store the token of node %s: %w", node, err)
	}
	db.committed()
	return nil
}

// NodeTokens returns every node token's sha256 with its node.
func (db *DB) NodeTokens(ctx context.Context) (map[[32]byte]string, error) {
	rows, err := db.cr().QueryContext(ctx, `SELECT node, sha256 FROM node_tokens`)
	if err != nil {
		return nil, fmt.Errorf("load node tokens: %w", err)
	}
	defer rows.Close()
	out := map[[32]byte]string{}
	for rows.Next() {
		var node string
		var h []byte
		if err := rows.Scan(&node, &h); err != nil {
			return nil, fmt.Errorf("load node tokens: %w", err)
		}
		var k [32]byte
		copy(k[:], h)
		out[k] = node
	}
	return out, rows.Err()
}
