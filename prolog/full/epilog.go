package full

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
)

// Collector runs node gc in collect mode: delete the cache files that no
// catalog entry wants, by the rules of package weights/gc (only cache names
// inside the cache dir, never a .part, never what a running job's record
// names, never a symlink; nothing when the catalog cannot be read). It must
// return when ctx ends.
type Collector func(ctx context.Context, cfg nodeconf.Agent) error

// Epilog is the Epilog for one node. Config has its defaults applied.
type Epilog struct {
	Config nodeconf.Agent
	// GC is node gc. Nil runs none (the interval is still claimed).
	GC  Collector
	Log io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Run clears the job's record and runs node gc, at most once per
// Config.GCInterval on the node and for at most Config.GCTimeout, so that
// the job's end, and the node's return to idle, is not held up.
func (e *Epilog) Run(ctx context.Context, jobID string) {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	if jobID != "" {
		if err := prolog.ClearRecord(e.Config.RunDir, jobID); err != nil {
			fmt.Fprintf(e.Log, "llmgw epilog: job %s: %v\n", jobID, err)
		}
	}
	// The interval is claimed even when no gc is built in, so that the
	// hook's fast path (which hands the Epilog here only when gc is due)
	// does so once per interval, not on every job.
	release, ok, err := prolog.ClaimGC(e.Config.RunDir, e.Config.GCInterval, now())
	if err != nil {
		fmt.Fprintf(e.Log, "llmgw epilog: job %s: gc not run: %v\n", jobID, err)
		return
	}
	if !ok {
		return
	}
	defer release()
	if e.GC == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.Config.GCTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.GC(ctx, e.Config) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// A gc that ignores its context is not waited for: the Epilog
		// returns and the process exit ends it.
		err = fmt.Errorf("stopped after %s (gc_timeout): %w", e.Config.GCTimeout, ctx.Err())
	}
	if err != nil {
		fmt.Fprintf(e.Log, "llmgw epilog: job %s: gc: %v\n", jobID, err)
	}
}

// NodeGC is the Epilog's Collector: weights/gc in collect mode on this
// node, against the node-local catalog copy (the coordinator may be down at
// job end, and gc must not need it) and the job records of the jobs still
// running here. It logs each file it removed, refused or failed on, and
// says so when it removed nothing at all and why.
func NodeGC(log io.Writer) Collector {
	return func(ctx context.Context, cfg nodeconf.Agent) error {
		cp, cerr := catalog.ReadCopy(cfg.CatalogCopyPath())
		deadline, _ := ctx.Deadline()
		r := gc.Run(gc.Options{CacheDir: cfg.CacheDir, Catalog: cp, CatalogErr: cerr, RunDir: cfg.RunDir, Collect: true, Deadline: deadline, Recent: cfg.GCInterval, MaxShare: cfg.GCMaxShare, PartMaxAge: cfg.GCPartMaxAge,
			HFCache: cfg.HFCacheDir()})
		for _, f := range r.Files {
			switch f.Action {
			case gc.Removed, gc.Refused, gc.Failed:
				fmt.Fprintf(log, "llmgw epilog: gc %s %s: %s\n", f.Action, f.Name, f.Reason)
			}
		}
		if r.Held != "" {
			return fmt.Errorf("%s", r.Held)
		}
		if n := r.Count(gc.Removed); n > 0 {
			fmt.Fprintf(log, "llmgw epilog: gc removed %d files, %s freed\n", n, catalog.FormatBytes(r.Freed))
		}
		return nil
	}
}
