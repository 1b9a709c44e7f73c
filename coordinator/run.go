package coordinator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/coordinator/store"
)

// Run is the coordinator daemon: it reads the token files, opens (or
// creates) the database, serves until ctx ends, then shuts down gracefully
// and closes the database.
func Run(ctx context.Context, cfg Config, log *logrus.Logger) error {
	cfg = cfg.withDefaults()
	tokens, err := cfg.LoadTokens()
	if err != nil {
		return err
	}
	if tokens.Agent == "" && tokens.Admin == "" {
		log.Warn("no --agent-token-file or --admin-token-file: reports will be refused with 403 until one is configured")
	}
	if tokens.Admin == "" {
		log.Warn("no --admin-token-file: catalog changes will be refused with 403")
	}
	if err := os.MkdirAll(filepath.Dir(cfg.DB), 0o750); err != nil {
		return fmt.Errorf("database directory: %w", err)
	}
	db, err := store.Open(ctx, cfg.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	s, err := New(ctx, cfg, tokens, db, log)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
