// Package full is the part of llmgw's Slurm hooks that runs in the full
// llmgw binary: the Prolog's slow path (resolve the model through the
// coordinator or the catalog copy, ensure the weights through the agent or
// in-process, record the outcome, tell the job's owner through
// AdminComment) and the Epilog's node gc. The llmgw-hook binary hands a job
// here when its fast path (package prolog) cannot settle it.
//
// Every failure here is logged and recorded, never returned as an exit
// status: see package prolog for the policy and why.
package full

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/gc"
)

// coordinatorWait bounds the catalog lookup at the coordinator: past it
// the node-local copy answers, and the rest of the fetch deadline is left
// for the bytes.
const coordinatorWait = 10 * time.Second

// progressEvery is how often a waiting Prolog logs the fetch's progress to
// slurmd's log.
const progressEvery = 30 * time.Second

// Prolog is the slow path of the Prolog for one node. Config has its
// defaults applied.
type Prolog struct {
	Config nodeconf.Agent
	// Coordinator resolves model names; nil when no coordinator is
	// configured, and then the catalog copy does.
	Coordinator *api.Client
	// Agent is the node agent's socket.
	Agent *api.LocalClient
	// Fetcher fetches in-process, under the node-local lock, when no agent
	// answers.
	Fetcher *fetch.Fetcher
	// Slurm sets the job's AdminComment when the weights cannot be had.
	Slurm *slurm.Runner
	// Log is slurmd's log (the hook's stderr).
	Log io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time

	// mu serializes the log: the fetcher reports progress from its own
	// goroutine, which may outlive the wait that gave up on it.
	mu           sync.Mutex
	lastProgress time.Time
}

func (p *Prolog) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Prolog) logf(job, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.Log, "llmgw prolog: job %s: %s\n", job, fmt.Sprintf(format, args...))
}

// Run makes the job's weights present, or finds out why they cannot be,
// within Config.FetchDeadline, and records the outcome for the TaskProlog.
// It returns nothing: every outcome is in the record and the log.
func (p *Prolog) Run(ctx context.Context, job prolog.Job, jobErr error) {
	if jobErr == nil && job.Model == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.Config.FetchDeadline)
	defer cancel()
	rec := catalog.JobRecord{Job: job.ID, Model: job.Model}
	var err error
	what := "" // the source, as the reason names it
	if jobErr != nil {
		err = fmt.Errorf("bad job description: %w", jobErr)
	} else {
		var m catalog.Model
		if m, err = p.resolve(ctx, job); err == nil {
			rec.Source, rec.Set = m.Source, prolog.SetOf(m)
			what = rec.Source
			if m.IsSet() {
				// The failure names the file; the first file's source
				// beside it would only mislead.
				what = fmt.Sprintf("%d files in %s", len(m.Files), rec.Set)
			}
			var hfCache string
			rec.Path, hfCache, err = p.present(ctx, job, m)
			prolog.HubRecord(p.Config, m, hfCache, &rec)
		}
	}
	if err != nil {
		rec.Error = p.reason(ctx, job, what, err)
		rec.Path, rec.HFCache, rec.HFOffline = "", "", false
	}
	rec.Time = p.now().UTC()
	if werr := catalog.WriteJobRecord(p.Config.RunDir, rec); werr != nil {
		// The TaskProlog will find no record; with the SPANK plugin it fails
		// the job saying so, without it the job runs without the variables.
		p.logf(job.ID, "cannot record the outcome for the TaskProlog: %v", werr)
	}
	if err != nil {
		p.logf(job.ID, "%s", rec.Error)
		p.adminComment(job, rec.Error)
		return
	}
	p.logf(job.ID, "model %s at %s", job.Model, rec.Path)
}

// reason is the one line the job's owner reads: which model, which source,
// what went wrong.
func (p *Prolog) reason(ctx context.Context, job prolog.Job, source string, err error) string {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		err = fmt.Errorf("not ready within the fetch deadline of %s (fetch_deadline in agent.toml); the fetch goes on if another job waits for it, and a later job resumes it", p.Config.FetchDeadline)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "weights for model %s", job.Model)
	if source != "" {
		fmt.Fprintf(&b, " (source %s)", source)
	}
	fmt.Fprintf(&b, " could not be had on %s: %v", job.Node, err)
	if errors.Is(err, fetch.ErrNoSpace) {
		b.WriteString(p.gcHolds())
	}
	return b.String()
}

// gcHolds says, for a job refused for space, what gc holds that it
// would otherwise reclaim and why ("" when nothing): the admin's way out
// is then in the job's own reason. It only lists, under every guard, as
// the Epilog's gc would.
func (p *Prolog) gcHolds() string {
	cfg := p.Config
	cp, cerr := catalog.ReadCopy(cfg.CatalogCopyPath())
	r := gc.Run(gc.Options{CacheDir: cfg.CacheDir, Catalog: cp, CatalogErr: cerr, RunDir: cfg.RunDir, Recent: cfg.GCInterval,
		MaxShare: cfg.GCMaxShare, PartMaxAge: cfg.GCPartMaxAge, Deadline: p.now().Add(5 * time.Second)})
	var held int64
	for _, f := range r.Files {
		// What only the run's hold keeps: garbage by every rule for a
		// single file.
		if f.Action == gc.Listed || f.Action == gc.Kept && f.Reason == r.Held {
			held += f.Size
		}
	}
	if r.Held == "" || held == 0 {
		return ""
	}
	return fmt.Sprintf("; gc holds %s it would reclaim on this node: %s", catalog.FormatBytes(held), r.Held)
}

// resolve finds the model's catalog entry: at the coordinator when one is
// configured and answers, else in the agent's node-local catalog copy. A
// coordinator that answers without the model is believed (the copy is
// only older); one that does not answer is not needed.
func (p *Prolog) resolve(ctx context.Context, job prolog.Job) (catalog.Model, error) {
	if p.Coordinator != nil {
		cctx, cancel := context.WithTimeout(ctx, coordinatorWait)
		cat, err := p.Coordinator.Catalog(cctx)
		cancel()
		if err == nil {
			cp := catalog.Copy{Coordinator: p.Coordinator.BaseURL, Fetched: p.now().UTC(), Models: cat.Models,
				CatalogID: cat.CatalogID, Generation: cat.Generation, History: cat.History, Superseded: cat.Superseded,
				Adopted: cat.Trusted, AdoptedAt: cat.TrustedAt}
			p.refreshCopy(job, cp)
			if m, ok := cp.Lookup(job.Model); ok {
				return m, nil
			}
			return catalog.Model{}, fmt.Errorf("model %s is not in the catalog at %s; see 'llmgw models list'", job.Model, p.Coordinator.BaseURL)
		}
		p.logf(job.ID, "coordinator %s: %v; resolving %s from the node's catalog copy", p.Coordinator.BaseURL, err, job.Model)
	}
	// The private copy holds sources whole (a signed URL's signature,
	// which the world-readable copy leaves out); the Prolog runs as root
	// and reads it when it is there.
	path := catalog.PrivateCopyPath(p.Config.CatalogCopyPath())
	cp, err := catalog.ReadCopy(path)
	if err != nil {
		path = p.Config.CatalogCopyPath()
		cp, err = catalog.ReadCopy(path)
	}
	if err != nil {
		return catalog.Model{}, fmt.Errorf("no coordinator answered and the node's %w", err)
	}
	m, ok := cp.Lookup(job.Model)
	if !ok {
		return catalog.Model{}, fmt.Errorf("model %s is not in the node's catalog copy %s (from %s at %s)", job.Model, path, cp.Coordinator, cp.Fetched.Format(time.RFC3339))
	}
	return m, nil
}

// present looks for m's weights on this node within Config.FSTimeout()
// before anything else touches them, and ensures them only when they are
// not there: a stuck filer must not hold the Prolog (slurmd kills it and
// drains the node), and neither the agent nor the fetcher bound their
// stat of a path or of the cache.
//
// A Hub model found in a weight directory's Hugging Face cache is had
// there, and hfCache names that cache; one fetched is in hf_cache.
func (p *Prolog) present(ctx context.Context, job prolog.Job, m catalog.Model) (path, hfCache string, err error) {
	path, hfCache, err = prolog.PresentOnNode(p.Config, m, p.deadlineLeft(ctx))
	if err == nil || !errors.Is(err, prolog.ErrNotPresent) {
		return path, hfCache, err
	}
	path, err = p.ensure(ctx, job, m)
	return path, "", err
}

// deadlineLeft is what is left of the Prolog's deadline: the whole budget
// of a look at the weights.
func (p *Prolog) deadlineLeft(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return p.Config.FetchDeadline
}

// refreshCopy writes the catalog the coordinator just gave as the node's
// copy. The agent does so on its own schedule, but it may be down, and the
// Epilog's gc judges the cache against this copy: one that lacks the model
// this Prolog is about to fetch would have gc remove it at the job's end.
// A failure is logged only: the job goes on, and gc keeps recent fetches.
// The copy keeps the node's trust (catalog.UpdateCopy): a catalog of
// another identity or an older generation resolves this job's model, but
// gc does not collect against it.
func (p *Prolog) refreshCopy(job prolog.Job, cp catalog.Copy) {
	if _, err := catalog.UpdateCopy(p.Config.CatalogCopyPath(), cp); err != nil {
		p.logf(job.ID, "keeping the node's catalog copy as it was: %v", err)
	}
}

// ensure makes m's weights present: through the agent, which runs one
// fetch per source for the node and shows it in `llmgw status`; or, when
// no agent answers (not running, or stopping), in-process under the
// node-local lock, which still makes one fetch per source on the node.
func (p *Prolog) ensure(ctx context.Context, job prolog.Job, m catalog.Model) (string, error) {
	progress := func(f api.Fetch) {
		now := p.now()
		p.mu.Lock()
		due := now.Sub(p.lastProgress) >= progressEvery
		if due {
			p.lastProgress = now
		}
		p.mu.Unlock()
		if due {
			p.logf(job.ID, "fetching %s: %s of %s", f.Source, catalog.FormatBytes(f.Done), total(f.Total))
		}
	}
	if m.IsHub() {
		return p.ensureHub(ctx, job, m, progress)
	}
	if m.IsSet() {
		return p.ensureSet(ctx, job, m, progress)
	}
	// The declared digest, else the cluster's pin: every node of a job
	// verifies against the same one.
	path, err := p.ensureFile(ctx, job, api.EnsureRequest{Source: m.Source, SHA256: m.WantSHA256(), Size: m.Size}, progress)
	if err != nil {
		return "", pinMismatch(m.Name, m.Source, m.SHA256, m.Pinned, m.PinnedETag, err)
	}
	if m.NeedsPin() {
		if err := p.pin(ctx, job, m.Name, m.Source, path); err != nil {
			return "", err
		}
	}
	return path, nil
}

// ensureFile makes one file present: through the agent, else in-process.
// req.Set names the set directory of a file of a model of several.
func (p *Prolog) ensureFile(ctx context.Context, job prolog.Job, req api.EnsureRequest, progress func(api.Fetch)) (string, error) {
	path, err := p.Agent.Ensure(ctx, req, progress)
	if err != nil && agentAbsent(err) {
		p.logf(job.ID, "no agent: %v; fetching %s in this process", err, req.Source)
		p.Fetcher.OnProgress = func(pr fetch.Progress) {
			progress(api.Fetch{Source: pr.Source, Done: pr.Done, Total: pr.Total})
		}
		want := fetch.Want{SHA256: req.SHA256, Size: req.Size}
		if req.Set != "" {
			path, err = p.Fetcher.EnsureIn(ctx, req.Set, req.Source, want)
		} else {
			path, err = p.Fetcher.Ensure(ctx, req.Source, want)
		}
	}
	return path, err
}

// ensureHub makes every file of the Hub model m present in the node's
// Hugging Face cache (weights/fetch/hub.go): through the agent, which runs
// one fetch of the model for the node and shows it in `llmgw status`; or
// in this process when no agent answers, or when the agent is older than
// Hub models (it refuses the request's hub field: it decodes strictly),
// under the same node-wide locks. The path is catalog.HubPath: the
// snapshot directory, or a GGUF selection's first part.
func (p *Prolog) ensureHub(ctx context.Context, job prolog.Job, m catalog.Model, progress func(api.Fetch)) (string, error) {
	path, err := p.Agent.Ensure(ctx, api.EnsureRequest{Source: m.Source, Hub: m.Hub}, progress)
	var ae *api.Error
	old := errors.As(err, &ae) && ae.Code == api.CodeInvalid && strings.Contains(ae.Message, `unknown field "hub"`)
	if err != nil && (agentAbsent(err) || old) {
		if old {
			p.logf(job.ID, "the agent on this node is older than Hub models (restart it after an upgrade); fetching %s in this process", m.Hub.Repo)
		} else {
			p.logf(job.ID, "no agent: %v; fetching %s in this process", err, m.Hub.Repo)
		}
		p.Fetcher.OnProgress = func(pr fetch.Progress) {
			progress(api.Fetch{Source: pr.Source, Done: pr.Done, Total: pr.Total})
		}
		path, err = p.Fetcher.EnsureHub(ctx, p.Config.HFCacheDir(), *m.Hub)
	}
	if err != nil {
		return "", err
	}
	if path != catalog.HubSnapshotDir(p.Config.HFCacheDir(), m.Hub.Repo, m.Hub.Commit) {
		// An agent configured with another hf_cache than this Prolog's
		// (an agent.toml edited and the agent not restarted): the job
		// would be told a cache the snapshot is not in.
		return "", fmt.Errorf("the agent fetched %s into %s, not into this node's hf_cache %s; restart the agent after changing agent.toml", m.Hub.Repo, path, p.Config.HFCacheDir())
	}
	return catalog.HubPath(p.Config.HFCacheDir(), *m.Hub), nil
}

// ensureSet makes every file of the model of several files m present in
// its set directory (weights/catalog/set.go): the manifest first, so that
// the directory is not counted held until every file it names is there;
// then each file, verified against its own declared or pinned digest, and
// pinned on its own when it has neither. A failure names the file.
func (p *Prolog) ensureSet(ctx context.Context, job prolog.Job, m catalog.Model, progress func(api.Fetch)) (string, error) {
	if err := catalog.WriteManifest(p.Config.CacheDir, m); err != nil {
		return "", fmt.Errorf("set directory of model %s: %w", m.Name, err)
	}
	set := catalog.SetName(m)
	paths := make([]string, len(m.Files))
	// Every file at once, through the agent: one revision, fetched once
	// per fabric through its swarm when the files are pinned (issue 25).
	// An agent older than that refuses the request's files (it decodes
	// strictly), and one that is not there cannot answer: then file by
	// file, as before.
	_, err := p.Agent.Ensure(ctx, api.EnsureRequest{Source: m.Source, Set: set, Files: m.Files}, progress)
	var ae *api.Error
	old := errors.As(err, &ae) && ae.Code == api.CodeInvalid && strings.Contains(ae.Message, `unknown field "files"`)
	if err == nil {
		for i, f := range m.Files {
			paths[i] = catalog.SetFilePath(catalog.SetDir(p.Config.CacheDir, m), f.Source)
		}
	} else if !old && !agentAbsent(err) {
		for _, f := range m.Files {
			if e := pinMismatch(m.Name, f.Source, f.SHA256, f.Pinned, f.PinnedETag, err); e != err {
				return "", e
			}
		}
		// As below: no file's signed URL reaches the job's owner.
		msg := err.Error()
		for _, f := range m.Files {
			msg = strings.ReplaceAll(msg, f.Source, catalog.RedactQuery(f.Source))
		}
		return "", &redacted{msg: msg, err: err}
	}
	for i, f := range m.Files {
		if paths[i] != "" {
			continue
		}
		path, err := p.ensureFile(ctx, job, api.EnsureRequest{Source: f.Source, SHA256: f.WantSHA256(), Size: f.Size, Set: set}, progress)
		if err != nil {
			err = pinMismatch(m.Name, f.Source, f.SHA256, f.Pinned, f.PinnedETag, err)
			// The job record redacts the model's own source in its error
			// (catalog.WriteJobRecord), not the other files': a signed
			// URL's signature must not reach the job's owner through it.
			return "", &redacted{msg: fmt.Sprintf("file %d of %d, %s: %s", i+1, len(m.Files), catalog.FileName(f.Source),
				strings.ReplaceAll(err.Error(), f.Source, catalog.RedactQuery(f.Source))), err: err}
		}
		paths[i] = path
	}
	for i, f := range m.Files {
		if f.NeedsPin() {
			if err := p.pin(ctx, job, m.Name, f.Source, paths[i]); err != nil {
				return "", fmt.Errorf("file %s: %w", catalog.FileName(f.Source), err)
			}
		}
	}
	return catalog.SetPath(p.Config.CacheDir, m), nil
}

// redacted is err said as msg: the same error for errors.Is and As.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// pinMismatch turns a fetch of source that failed verification against
// its pin into catalog.PinMismatch: a verification failure names the
// pinned digest and the one it got; nothing else that can fail does both.
// Any other error is returned as it is.
func pinMismatch(model, source, declared, pinned, origin string, err error) error {
	if msg := err.Error(); declared == "" && pinned != "" && strings.Contains(msg, pinned) {
		if got := catalog.OtherSHA256(msg, pinned); got != "" {
			return errors.New(catalog.PinMismatch(model, api.RedactSource(source), pinned, origin, got))
		}
	}
	return err
}

// pin tells the coordinator what the first verified fetch of m got, so
// that every later fetch on every node verifies against it. A coordinator
// that holds another pin (another node pinned first, and the origin
// changed in between) fails the job: its nodes would otherwise load
// different bytes. A coordinator that does not answer fails nothing (the
// bytes are what the origin served, as without pinning) and the next
// fetch on any node pins.
func (p *Prolog) pin(ctx context.Context, job prolog.Job, model, source, path string) error {
	if p.Coordinator == nil {
		return nil
	}
	sum, err := fetch.Digest(ctx, path)
	if err != nil {
		return fmt.Errorf("hashing %s to pin it: %w", path, err)
	}
	cctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	// How the origin named the version it served, noted on the file by
	// whichever process fetched it (the agent, or this one), is recorded
	// beside the pin for the admin.
	origin := fetch.RecordedOrigin(path)
	_, err = p.Coordinator.Pin(cctx, api.PinRequest{Source: source, SHA256: sum, ETag: origin, Node: job.Node})
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeConflict:
		// Not the cluster's bytes: left in the cache, the next job's
		// fast path (which checks no digest) would take them.
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			p.logf(job.ID, "cannot remove %s, which holds other bytes than %s is pinned to: %v", path, model, rerr)
		}
		return ae
	case err != nil:
		p.logf(job.ID, "could not pin %s (%s) to sha256 %s at %s: %v; the next fetch pins", model, api.RedactSource(source), sum, p.Coordinator.BaseURL, err)
	default:
		if origin != "" {
			p.logf(job.ID, "pinned %s (%s) to sha256 %s (the origin served it as %s)", model, api.RedactSource(source), sum, origin)
		} else {
			p.logf(job.ID, "pinned %s (%s) to sha256 %s", model, api.RedactSource(source), sum)
		}
	}
	return nil
}

// agentAbsent reports whether err means the agent is not there to ask
// (nothing listens, or it is stopping), as opposed to an agent that tried
// and failed, whose failure a second attempt here would only repeat.
func agentAbsent(err error) bool {
	var ae *api.Error
	return errors.Is(err, api.ErrNoAgent) || errors.As(err, &ae) && ae.Code == api.CodeUnavailable
}

func total(n int64) string {
	if n < 0 {
		return "unknown size"
	}
	return catalog.FormatBytes(n)
}

// maxAdminComment keeps the comment well inside what slurmctld stores and
// what `scontrol show job` prints on one line.
const maxAdminComment = 900

// adminComment sets the job's AdminComment to the reason, so that
// `scontrol show job` and sacct show why the job failed. Only the Prolog
// can: it runs as root, the TaskProlog as the job's user. This is the only
// call to slurmctld the hooks make, and only on failure.
func (p *Prolog) adminComment(job prolog.Job, reason string) {
	if p.Slurm == nil || job.ID == "" {
		return
	}
	c := prolog.Reason(reason)
	if len(c) > maxAdminComment {
		c = c[:maxAdminComment] + "…"
	}
	ctx, cancel := context.WithTimeout(context.Background(), slurm.DefaultTimeout)
	defer cancel()
	if _, err := p.Slurm.Run(ctx, "scontrol", "update", "JobId="+job.ID, "AdminComment="+c); err != nil {
		p.logf(job.ID, "setting AdminComment: %v", err)
	}
}
