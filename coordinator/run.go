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
	if err := cfg.checkRemoved(); err != nil {
		return err
	}
	tokens, err := cfg.LoadTokens()
	if err != nil {
		return err
	}
	if tokens.Admin == "" && cfg.MungeSocket == "" {
		log.Warn("no --admin-token-file and no munge_socket: catalog changes will be refused with 403, " +
			"and no node can be given its token (llmgw nodes token NODE) to report with")
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
