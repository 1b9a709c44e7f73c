package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// refreshCatalog reads the catalog from the coordinator and keeps a copy in
// the state directory (world-readable with signed URLs redacted, and whole
// in a 0600 file beside it), so that the hooks can resolve a model name to its
// source while the coordinator is down. A failure keeps the last copy: an
// old catalog resolves every model that has not changed, and nothing
// resolves none.
func refreshCatalog(ctx context.Context, c *api.Client, cfg Config) (catalog.Copy, error) {
	models, err := c.Models(ctx)
	if err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog: %w", err)
	}
	if models == nil {
		models = []api.Model{}
	}
	cp := catalog.Copy{Coordinator: cfg.Coordinator, Fetched: time.Now().UTC(), Models: models}
	path := cfg.CatalogCopyPath()
	// The private copy first: a Prolog must never find a public copy
	// newer than the private one it fetches from.
	if err := catalog.WritePrivateCopy(path, cp); err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog copy: %w", err)
	}
	if err := catalog.WriteCopy(path, cp); err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog copy: %w", err)
	}
	return cp, nil
}
