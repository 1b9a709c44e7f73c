package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/llmgw/llmgw/api"
)

// refreshCatalog reads the catalog from the coordinator and keeps a copy in
// the state directory, so that the hooks can resolve a model name to its
// source while the coordinator is down. A failure keeps the last copy: an
// old catalog resolves every model that has not changed, and nothing
// resolves none.
func refreshCatalog(ctx context.Context, c *api.Client, cfg Config) (api.CatalogCopy, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return api.CatalogCopy{}, fmt.Errorf("catalog: %w", err)
	}
	if models == nil {
		models = []api.Model{}
	}
	cp := api.CatalogCopy{Coordinator: cfg.Coordinator, Fetched: time.Now().UTC(), Models: models}
	path := cfg.CatalogCopyPath()
	if err := writeJSONAtomic(path, cp); err != nil {
		return api.CatalogCopy{}, fmt.Errorf("catalog copy: %w", err)
	}
	return cp, nil
}

// writeJSONAtomic writes v to path so that a reader sees the old file or
// the new one, never a torn one: a temporary file beside it, fsynced,
// renamed over it, and the directory fsynced so the rename survives a crash.
// A hook reading a half-written catalog during a power cut would otherwise
// find no models at exactly the moment it needs them.
func writeJSONAtomic(path string, v any) (err error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	// The catalog holds no secrets, and the hooks may read it as the job's
	// user (TaskProlog).
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
