package agent

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/gc"
)

// answerGC runs a gc the coordinator handed over in the answer to a report
// and posts what this node did. The coordinator's list is a request: the
// node applies every rule itself (weights/gc), against its own catalog copy,
// cache directory and job records, and refuses what it cannot prove is
// garbage. A failed answer is logged and not retried: the operator's
// `llmgw gc` names this node as not answering, and the next gc asks again.
func (a *Agent) answerGC(ctx context.Context, c *api.Client, cfg Config, ask api.GCAsk) {
	cp, cerr := catalog.ReadCopy(a.catalog.Path)
	if ask.Trust && cerr == nil && cp.Distrust() != "" {
		// An admin adopted the catalog as it stands (llmgw gc --trust):
		// trusted from now on, and this gc runs under every other guard.
		cp = cp.Trusted()
		if err := catalog.WriteCopy(a.catalog.Path, cp); err != nil {
			a.log.WithError(err).Warn("gc --trust: the catalog copy could not be marked trusted")
		} else {
			a.log.WithField("catalog_id", cp.CatalogID).Info("gc --trust: this node trusts the current catalog")
		}
	}
	only := ask.Remove
	if only == nil {
		// Asked nothing is not "everything": a coordinator must name what
		// it wants gone.
		only = []string{}
	}
	res := gc.Run(gc.Options{CacheDir: cfg.CacheDir, Catalog: cp, CatalogErr: cerr, RunDir: cfg.RunDir, Collect: ask.Collect, Only: only, Recent: cfg.GCInterval,
		Force: ask.Force, MaxShare: cfg.GCMaxShare, PartMaxAge: cfg.GCPartMaxAge})
	if ask.Force && ask.Collect && cerr == nil && res.Held == "" && cp.Distrust() != "" {
		// An operator forced a collect against this catalog: it is the one
		// this node trusts from now on, so that the next Epilog's gc does
		// not hold on it again.
		if err := catalog.WriteCopy(a.catalog.Path, cp.Trusted()); err != nil {
			a.log.WithError(err).Warn("gc: forced, but the catalog copy could not be marked trusted")
		}
	}
	if cp, err := catalog.ReadCopy(a.catalog.Path); err == nil {
		// --trust or --force may have moved the anchor.
		a.mu.Lock()
		a.noteGCHeldLocked(cp)
		a.mu.Unlock()
	}
	ans := gcAnswer(cfg.Node, res)
	// What eviction did lately, and what it would do now: the operator's
	// one place to see why the cache holds what it holds.
	// A name gc already answered about is gc's: it is listed once.
	seen := make(map[string]bool, len(ans.Files))
	for _, f := range ans.Files {
		seen[f.Name] = true
	}
	for _, f := range a.evictionListing(ctx, cfg) {
		if !seen[f.Name] {
			seen[f.Name] = true
			ans.Files = append(ans.Files, f)
		}
	}
	log := a.log.WithFields(logrus.Fields{"gc": ask.ID, "collect": ask.Collect, "asked": len(ask.Remove),
		"removed": res.Count(gc.Removed), "refused": res.Count(gc.Refused), "kept": res.Count(gc.Kept), "freed_bytes": res.Freed})
	if res.Held != "" {
		log = log.WithField("held", res.Held)
	}
	for _, f := range res.Files {
		if f.Action == gc.Refused || f.Action == gc.Failed {
			// Each refusal is worth a line: it is either a coordinator
			// asking for something it must not, or a file that changed.
			a.log.WithFields(logrus.Fields{"gc": ask.ID, "name": f.Name, "action": f.Action}).Warn("gc: " + f.Reason)
		}
	}
	if err := c.AnswerGC(ctx, ask.ID, ans); err != nil {
		log.WithError(err).Warn("gc ran, but its answer did not reach the coordinator")
		a.recordError("gc " + ask.ID + ": answer not delivered: " + err.Error())
	} else {
		log.Info("gc answered")
	}
	if res.Count(gc.Removed) > 0 {
		// What is gone must leave the next report too.
		a.kick(kickScan)
	}
}

// gcAnswer is a gc.Result on the wire.
func gcAnswer(node string, r gc.Result) api.GCAnswer {
	ans := api.GCAnswer{Node: node, CacheDir: r.CacheDir, Collect: r.Collect, Freed: r.Freed, Held: r.Held, Files: make([]api.GCFile, 0, len(r.Files))}
	for _, f := range r.Files {
		ans.Files = append(ans.Files, api.GCFile{Name: f.Name, Path: f.Path, Asked: f.Asked, Action: f.Action, Reason: f.Reason, Size: f.Size})
	}
	return ans
}
