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
	cat, err := c.Catalog(ctx)
	if err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog: %w", err)
	}
	// The copy keeps the trust of the one it replaces: a catalog of another
	// identity, or older than one this node saw, is used to resolve models
	// but gc does not collect against it (catalog.Copy.Distrust).
	cp, err := catalog.UpdateCopy(cfg.CatalogCopyPath(), catalog.Copy{Coordinator: cfg.Coordinator, Fetched: time.Now().UTC(),
		Models: cat.Models, CatalogID: cat.CatalogID, Generation: cat.Generation,
		History: cat.History, Superseded: cat.Superseded, Adopted: cat.Trusted, AdoptedAt: cat.TrustedAt})
	if err != nil {
		return catalog.Copy{}, fmt.Errorf("catalog copy: %w", err)
	}
	return cp, nil
}
