package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// refreshCatalog reads the catalog from the coordinator and keeps a copy in
// the state directory, so that the hooks can resolve a model name to its
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
	if err := catalog.WriteCopy(path, cp); err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog copy: %w", err)
	}
	return cp, nil
}
