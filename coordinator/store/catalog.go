package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// matcher says which catalog entry a reported weight is. It is rebuilt on
// every catalog change and used at ingest, so matching costs map lookups.
//
// The rules follow what each kind of source means on a node:
//   - a path source is the path itself, seen by the node, or a reported
//     weight directory the path lies below: with weights dir /models, a
//     catalog entry /models/llama/model.gguf is held by a node that reports
//     /models/llama complete, since the scan reports a model directory as
//     one weight and its completeness covers every file in it;
//   - a remote source (hf:, http(s)://) is the file catalog.CachePathFor
//     names in that node's cache directory, nowhere else: a file of the same
//     name elsewhere was not put there by llmgw and may be anything; a
//     model of several files is its set directory there (catalog.SetName),
//     which the scan counts complete only with every file in it;
//   - a bare model id is a Hugging Face cache snapshot of that id (or
//     "id@revision" for one revision);
//   - a Hub model (a repository at one commit) is a Hugging Face cache
//     snapshot of that repository at that commit, wherever the node found
//     it: the node judges it complete against the model's file list
//     (weights/scan), whoever downloaded it.
type matcher struct {
	byPath map[string]string // cleaned path → model
	// below maps every directory above a path source (but "/") to the
	// model: a reported weight there holds the source. When two sources lie
	// below one directory, the one first in path order wins; a weight is
	// one model.
	below       map[string]string
	byCacheName map[string]string // base name in a cache dir → model
	byModelID   map[string]string // "org/name" or "org/name@rev" → model
	byHub       map[string]string // "org/name@commit" → Hub model
}

func newMatcher(models []api.Model) *matcher {
	m := &matcher{byPath: map[string]string{}, below: map[string]string{}, byCacheName: map[string]string{}, byModelID: map[string]string{}, byHub: map[string]string{}}
	belowSource := map[string]string{}
	for _, mod := range models {
		if mod.IsHub() {
			m.byHub[mod.Hub.Repo+"@"+mod.Hub.Commit] = mod.Name
			continue
		}
		switch catalog.KindOf(mod.Source) {
		case catalog.KindPath:
			src := filepath.Clean(mod.Source)
			m.byPath[src] = mod.Name
			for _, dir := range ancestors(src) {
				if prev, ok := belowSource[dir]; !ok || src < prev {
					belowSource[dir], m.below[dir] = src, mod.Name
				}
			}
		case catalog.KindRemote:
			// A model of several files is its set directory in the
			// cache, which the scan reports as one weight.
			if mod.IsSet() {
				m.byCacheName[catalog.SetName(mod)] = mod.Name
				continue
			}
			m.byCacheName[catalog.CacheName(mod.Source)] = mod.Name
		case catalog.KindModelID:
			m.byModelID[mod.Source] = mod.Name
		}
	}
	return m
}

// model returns the catalog name of w as seen by a node whose cache
// directory is cacheDir (cleaned), or "". w.Path must be cleaned.
func (m *matcher) model(cacheDir string, w *api.Weight) string {
	if name, ok := m.byPath[w.Path]; ok {
		return name
	}
	if name, ok := m.below[w.Path]; ok {
		return name
	}
	if cacheDir != "" && len(m.byCacheName) > 0 {
		dir, base := filepath.Split(w.Path)
		// Without the slash Split leaves, a clean path's directory is
		// clean already, and CleanPath says so cheaply; filepath.Clean
		// gives the same for both spellings.
		if len(dir) > 1 {
			dir = dir[:len(dir)-1]
		}
		if catalog.CleanPath(dir) == cacheDir {
			if name, ok := m.byCacheName[base]; ok {
				return name
			}
		}
	}
	if w.ModelID != "" && w.Revision != "" && len(m.byHub) > 0 {
		if name, ok := m.byHub[w.ModelID+"@"+w.Revision]; ok {
			return name
		}
	}
	if w.ModelID != "" {
		if name, ok := m.byModelID[w.ModelID]; ok {
			return name
		}
		if w.Revision != "" {
			if name, ok := m.byModelID[w.ModelID+"@"+w.Revision]; ok {
				return name
			}
		}
	}
	return ""
}

// ancestors returns the directories above the clean absolute path p,
// nearest first, without "/": a weight reported at the root would be the
// whole filesystem.
func ancestors(p string) []string {
	var out []string
	for d := filepath.Dir(p); d != "/" && d != "." && d != p; p, d = d, filepath.Dir(d) {
		out = append(out, d)
	}
	return out
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func loadMatcher(ctx context.Context, q querier) (*matcher, error) {
	models, err := listModels(ctx, q)
	if err != nil {
		return nil, err
	}
	return newMatcher(models), nil
}

const modelCols = `name, source, size_bytes, sha256, gpu_memory_bytes, created, updated`

func scanModel(s interface{ Scan(...any) error }) (api.Model, error) {
	var m api.Model
	var created, updated int64
	err := s.Scan(&m.Name, &m.Source, &m.Size, &m.SHA256, &m.GPUMemory, &created, &updated)
	m.Created, m.Updated = fromNanos(created), fromNanos(updated)
	return m, err
}

func listModels(ctx context.Context, q querier) ([]api.Model, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+modelCols+` FROM catalog ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer rows.Close()
	out := []api.Model{}
	for rows.Next() {
		m, err := scanModel(rows)
		if err != nil {
			return nil, fmt.Errorf("list models: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	if err := addFiles(ctx, q, out); err != nil {
		return nil, err
	}
	if err := addHubs(ctx, q, out); err != nil {
		return nil, err
	}
	if err := addPins(ctx, q, out); err != nil {
		return nil, err
	}
	return out, nil
}

const fileCols = `source, size_bytes, sha256, pinned_sha256, pinned_etag`

func scanFile(s interface{ Scan(...any) error }, f *api.File) error {
	return s.Scan(&f.Source, &f.Size, &f.SHA256, &f.Pinned, &f.PinnedETag)
}

// addFiles fills the files of the models of several files among models,
// a whole catalog read by q.
func addFiles(ctx context.Context, q querier, models []api.Model) error {
	rows, err := q.QueryContext(ctx, `SELECT name, `+fileCols+` FROM catalog_files ORDER BY name, idx`)
	if err != nil {
		return fmt.Errorf("list model files: %w", err)
	}
	defer rows.Close()
	files := map[string][]api.File{}
	for rows.Next() {
		var name string
		var f api.File
		if err := rows.Scan(&name, &f.Source, &f.Size, &f.SHA256, &f.Pinned, &f.PinnedETag); err != nil {
			return fmt.Errorf("list model files: %w", err)
		}
		files[name] = append(files[name], f)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list model files: %w", err)
	}
	for i := range models {
		models[i].Files = files[models[i].Name]
	}
	return nil
}

// readFiles fills the files of m, when it is a model of several.
func readFiles(ctx context.Context, q querier, m *api.Model) error {
	rows, err := q.QueryContext(ctx, `SELECT `+fileCols+` FROM catalog_files WHERE name = ? ORDER BY idx`, m.Name)
	if err != nil {
		return fmt.Errorf("files of model %s: %w", m.Name, err)
	}
	defer rows.Close()
	m.Files = nil
	for rows.Next() {
		var f api.File
		if err := scanFile(rows, &f); err != nil {
			return fmt.Errorf("files of model %s: %w", m.Name, err)
		}
		m.Files = append(m.Files, f)
	}
	return rows.Err()
}

// sourcesOf is every source m names: its own and its files'.
func sourcesOf(m api.Model) []string {
	out := []string{m.Source}
	for _, f := range m.Files {
		if f.Source != m.Source {
			out = append(out, f.Source)
		}
	}
	return out
}

// putFiles replaces the files of m in the transaction, keeping the pin of
// every file whose source stays (a pin is of the bytes of one source).
func putFiles(ctx context.Context, tx *sql.Tx, m *api.Model) error {
	type pin struct {
		sha, etag, node string
		at              int64
	}
	old := map[string]pin{}
	rows, err := tx.QueryContext(ctx, `SELECT source, pinned_sha256, pinned_etag, pinned_node, pinned FROM catalog_files WHERE name = ?`, m.Name)
	if err != nil {
		return err
	}
	for rows.Next() {
		var src string
		var p pin
		if err := rows.Scan(&src, &p.sha, &p.etag, &p.node, &p.at); err != nil {
			rows.Close()
			return err
		}
		old[src] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog_files WHERE name = ?`, m.Name); err != nil {
		return err
	}
	for i := range m.Files {
		f := &m.Files[i]
		p := old[f.Source]
		if f.SHA256 != "" {
			p = pin{}
		}
		f.Pinned, f.PinnedETag = p.sha, p.etag
		_, err := tx.ExecContext(ctx, `INSERT INTO catalog_files (name, idx, source, size_bytes, sha256, pinned_sha256, pinned_etag, pinned_node, pinned)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, m.Name, i, f.Source, f.Size, f.SHA256, p.sha, p.etag, p.node, p.at)
		if err != nil {
			return err
		}
	}
	return nil
}

// Models returns the catalog in name order.
func (db *DB) Models(ctx context.Context) ([]api.Model, error) {
	return listModels(ctx, db.cr())
}

// CatalogIdentity returns the catalog's identity, made once with the
// database, and its generation, which every change to the catalog raises
// by one (see migrations/0004_catalog_identity.sql).
func (db *DB) CatalogIdentity(ctx context.Context) (id string, generation int64, err error) {
	err = db.cr().QueryRowContext(ctx, `SELECT id, generation FROM catalog_identity`).Scan(&id, &generation)
	if err != nil {
		return "", 0, fmt.Errorf("catalog identity: %w", err)
	}
	return id, generation, nil
}

// Model returns one catalog entry, or an error wrapping ErrNotFound.
func (db *DB) Model(ctx context.Context, name string) (api.Model, error) {
	m, err := scanModel(db.cr().QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE name = ?`, name))
	if err == sql.ErrNoRows {
		return api.Model{}, fmt.Errorf("model %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return api.Model{}, fmt.Errorf("model %s: %w", name, err)
	}
	if err := readFiles(ctx, db.cr(), &m); err != nil {
		return api.Model{}, err
	}
	if err := readHub(ctx, db.cr(), &m); err != nil {
		return api.Model{}, err
	}
	if m.SHA256 == "" && !m.IsSet() && !m.IsHub() {
		if err := readPin(ctx, db.cr(), &m); err != nil {
			return api.Model{}, err
		}
	}
	return m, nil
}

// PutModel adds m to the catalog or replaces the entry of the same name,
// and returns the stored entry and whether it was new. The caller validates
// m. A source that another entry already has is an error wrapping
// ErrConflict.
//
// Presence already reported is matched against the entry in the same
// transaction: a model added after the reports arrived is held at once,
// not one interval later.
func (db *DB) PutModel(ctx context.Context, m api.Model, now time.Time) (api.Model, bool, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	}
	defer tx.Rollback()

	if m.IsSet() {
		// A model of several files is named by its first (see
		// migrations/0007_catalog_files.sql).
		m.Source = m.Files[0].Source
	}
	if m.IsHub() {
		// A Hub model by its repository and commit (0010_catalog_hub.sql).
		m.Source = catalog.HubSource(m.Hub.Repo, m.Hub.Commit)
	}
	if why, err := hubConflict(ctx, tx, m); err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	} else if why != "" {
		return api.Model{}, false, fmt.Errorf("put model %s: %s: %w", m.Name, why, ErrConflict)
	}
	for _, src := range sourcesOf(m) {
		var other string
		err = tx.QueryRowContext(ctx, `SELECT name FROM catalog WHERE source = ? AND name != ?
			UNION ALL SELECT name FROM catalog_files WHERE source = ? AND name != ? LIMIT 1`, src, m.Name, src, m.Name).Scan(&other)
		switch {
		case err == nil:
			return api.Model{}, false, fmt.Errorf("put model %s: source %s is already model %s; remove that one first, or give this one another source: %w", m.Name, src, other, ErrConflict)
		case err != sql.ErrNoRows:
			return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
		}
	}

	old, err := scanModel(tx.QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE name = ?`, m.Name))
	created := err == sql.ErrNoRows
	if err != nil && !created {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	}
	if !created {
		if err := readFiles(ctx, tx, &old); err != nil {
			return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
		}
	}
	m.Updated = now.UTC()
	m.Created = m.Updated
	if !created {
		m.Created = old.Created
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO catalog (`+modelCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET source = excluded.source, size_bytes = excluded.size_bytes,
			sha256 = excluded.sha256, gpu_memory_bytes = excluded.gpu_memory_bytes, updated = excluded.updated`,
		m.Name, m.Source, m.Size, m.SHA256, m.GPUMemory, nanos(m.Created), nanos(m.Updated))
	if err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	}
	if err := putFiles(ctx, tx, &m); err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: files: %w", m.Name, err)
	}
	if err := putHub(ctx, tx, m); err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: Hub repository: %w", m.Name, err)
	}
	match, err := loadMatcher(ctx, tx)
	if err != nil {
		return api.Model{}, false, err
	}
	if created || old.Source != m.Source || old.IsSet() != m.IsSet() || m.IsSet() && catalog.SetName(old) != catalog.SetName(m) {
		ns := needles(m)
		if !created {
			ns = append(ns, modelNeedle(m.Name))
		}
		if err := rematch(ctx, tx, match, ns); err != nil {
			return api.Model{}, false, fmt.Errorf("put model %s: match presence: %w", m.Name, err)
		}
	}
	var dropped, wanted []string
	now2 := cacheNames(m)
	for n := range now2 {
		wanted = append(wanted, n)
	}
	if !created {
		for n := range cacheNames(old) {
			if !now2[n] {
				dropped = append(dropped, n)
			}
		}
	}
	if err := changed(ctx, tx, now, m.Name, dropped, wanted); err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return api.Model{}, false, fmt.Errorf("put model %s: %w", m.Name, err)
	}
	db.committed()
	db.match = match
	return m, created, nil
}

// DeleteModel removes a catalog entry, or returns an error wrapping
// ErrNotFound. Presence stays (it is what the nodes see); its weights stop
// being that model, and become another entry if one matches them.
func (db *DB) DeleteModel(ctx context.Context, name string) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete model %s: %w", name, err)
	}
	defer tx.Rollback()
	var dropped []string
	if old, err := scanModel(tx.QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE name = ?`, name)); err == nil {
		if err := readFiles(ctx, tx, &old); err != nil {
			return fmt.Errorf("delete model %s: %w", name, err)
		}
		for n := range cacheNames(old) {
			dropped = append(dropped, n)
		}
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM catalog WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete model %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("model %s: %w", name, ErrNotFound)
	}
	match, err := loadMatcher(ctx, tx)
	if err != nil {
		return err
	}
	if err := rematch(ctx, tx, match, []string{modelNeedle(name)}); err != nil {
		return fmt.Errorf("delete model %s: unmatch presence: %w", name, err)
	}
	if err := changed(ctx, tx, time.Now(), name, dropped, nil); err != nil {
		return fmt.Errorf("delete model %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete model %s: %w", name, err)
	}
	db.committed()
	db.match = match
	return nil
}

// RenameModel gives the catalog entry old the name new, in one
// transaction: its sources, pins, files and the presence of its weights
// follow it, so at no moment does any node see its files unwanted (an rm
// then an add left a window in which gc could collect them). It wraps
// ErrNotFound when old does not exist and ErrConflict when new does.
func (db *DB) RenameModel(ctx context.Context, old, new string, now time.Time) (api.Model, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	tx, err := db.cw().BeginTx(ctx, nil)
	if err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	defer tx.Rollback()
	m, err := scanModel(tx.QueryRowContext(ctx, `SELECT `+modelCols+` FROM catalog WHERE name = ?`, old))
	if err == sql.ErrNoRows {
		return api.Model{}, fmt.Errorf("model %s: %w", old, ErrNotFound)
	}
	if err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	var taken int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM catalog WHERE name = ?`, new).Scan(&taken); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	if taken > 0 {
		return api.Model{}, fmt.Errorf("rename model %s: model %s already exists; remove it first, or pick another name: %w", old, new, ErrConflict)
	}
	// The rows that name the entry move with it; the foreign keys are
	// checked at commit, once all of them have.
	for _, q := range []string{`PRAGMA defer_foreign_keys = ON`,
		`UPDATE catalog SET name = ?2, updated = ?3 WHERE name = ?1`,
		`UPDATE catalog_files SET name = ?2 WHERE name = ?1`,
		`UPDATE catalog_hub SET name = ?2 WHERE name = ?1`,
		`UPDATE catalog_hub_files SET name = ?2 WHERE name = ?1`,
		`UPDATE pins SET name = ?2 WHERE name = ?1`,
		`UPDATE seed_requests SET model = ?2 WHERE model = ?1`} {
		if _, err := tx.ExecContext(ctx, q, old, new, nanos(now)); err != nil {
			return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
		}
	}
	m.Name, m.Updated = new, now.UTC()
	if err := readFiles(ctx, tx, &m); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	// A Hub model keeps its repository, commit and list: the snapshot
	// every node holds is the new name's, matched by its needle below.
	if err := readHub(ctx, tx, &m); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	match, err := loadMatcher(ctx, tx)
	if err != nil {
		return api.Model{}, err
	}
	if err := rematch(ctx, tx, match, append(needles(m), modelNeedle(old))); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: match presence: %w", old, err)
	}
	if err := changed(ctx, tx, now, new, nil, nil); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	if err := tx.Commit(); err != nil {
		return api.Model{}, fmt.Errorf("rename model %s: %w", old, err)
	}
	db.committed()
	db.match = match
	return m, nil
}
