package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// A Hub model's repository, revision, commit and files live in
// catalog_hub and catalog_hub_files (migrations/0010_catalog_hub.sql).

// addHubs fills the Hub of every Hub model among models, a whole catalog
// read by q.
func addHubs(ctx context.Context, q querier, models []api.Model) error {
	hubs, err := readHubs(ctx, q, "", "")
	if err != nil {
		return err
	}
	for i := range models {
		if h, ok := hubs[models[i].Name]; ok {
			models[i].Hub = h
		}
	}
	return nil
}

// readHub fills the Hub of m, when it is a Hub model.
func readHub(ctx context.Context, q querier, m *api.Model) error {
	hubs, err := readHubs(ctx, q, " WHERE name = ?", m.Name)
	if err != nil {
		return err
	}
	m.Hub = hubs[m.Name]
	return nil
}

// readHubs reads the Hub models' rows, all or (where, arg) one.
func readHubs(ctx context.Context, q querier, where string, arg string) (map[string]*catalog.Hub, error) {
	args := []any{}
	if where != "" {
		args = append(args, arg)
	}
	rows, err := q.QueryContext(ctx, `SELECT name, repo, revision, commit_id, include, exclude, listed FROM catalog_hub`+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list Hub models: %w", err)
	}
	hubs := map[string]*catalog.Hub{}
	for rows.Next() {
		var name, include, exclude string
		var listed int
		h := &catalog.Hub{Files: []catalog.HubFile{}}
		if err := rows.Scan(&name, &h.Repo, &h.Revision, &h.Commit, &include, &exclude, &listed); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list Hub models: %w", err)
		}
		if err := json.Unmarshal([]byte(include), &h.Include); err != nil {
			rows.Close()
			return nil, fmt.Errorf("Hub model %s: include: %w", name, err)
		}
		if err := json.Unmarshal([]byte(exclude), &h.Exclude); err != nil {
			rows.Close()
			return nil, fmt.Errorf("Hub model %s: exclude: %w", name, err)
		}
		if len(h.Include) == 0 {
			h.Include = nil
		}
		if len(h.Exclude) == 0 {
			h.Exclude = nil
		}
		h.Listed = listed != 0
		hubs[name] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list Hub models: %w", err)
	}
	if len(hubs) == 0 {
		return hubs, nil
	}
	rows, err = q.QueryContext(ctx, `SELECT name, path, size_bytes, sha256, blob FROM catalog_hub_files`+where+` ORDER BY name, idx`, args...)
	if err != nil {
		return nil, fmt.Errorf("list Hub model files: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var f catalog.HubFile
		if err := rows.Scan(&name, &f.Path, &f.Size, &f.SHA256, &f.Blob); err != nil {
			return nil, fmt.Errorf("list Hub model files: %w", err)
		}
		if h := hubs[name]; h != nil {
			h.Files = append(h.Files, f)
		}
	}
	return hubs, rows.Err()
}

// hubConflict says which other entry already holds m's repository, or "".
// A repository is one model (see the migration).
func hubConflict(ctx context.Context, tx *sql.Tx, m api.Model) (string, error) {
	if !m.IsHub() {
		return "", nil
	}
	var other, commit string
	err := tx.QueryRowContext(ctx, `SELECT name, commit_id FROM catalog_hub WHERE repo = ? COLLATE NOCASE AND name != ?`, m.Hub.Repo, m.Name).Scan(&other, &commit)
	switch {
	case err == sql.ErrNoRows:
		return "", nil
	case err != nil:
		return "", err
	}
	return fmt.Sprintf("repository %s is already model %s (at commit %s): a repository is one model, since an engine given its id finds one revision; "+
		"move %s with 'llmgw models repin %s', or remove it first", m.Hub.Repo, other, commit, other, other), nil
}

// putHub replaces the Hub rows of m in tx: none for a model that is not
// one (any a former Hub model of that name had go).
func putHub(ctx context.Context, tx *sql.Tx, m api.Model) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM catalog_hub WHERE name = ?`, m.Name); err != nil {
		return err
	}
	if !m.IsHub() {
		return nil
	}
	h := m.Hub
	include, _ := json.Marshal(nonNil(h.Include))
	exclude, _ := json.Marshal(nonNil(h.Exclude))
	listed := 0
	if h.Listed {
		listed = 1
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO catalog_hub (name, repo, revision, commit_id, include, exclude, listed) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		m.Name, h.Repo, h.Revision, h.Commit, string(include), string(exclude), listed); err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, `INSERT INTO catalog_hub_files (name, idx, path, size_bytes, sha256, blob) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for i, f := range h.Files {
		if _, err := st.ExecContext(ctx, m.Name, i, f.Path, f.Size, f.SHA256, f.Blob); err != nil {
			return err
		}
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
