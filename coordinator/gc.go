package coordinator

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

// A cluster-wide gc cannot be pushed: the coordinator has no way into a
// node but the answer to that node's own report. So POST /v1/gc records the
// request, the next report of each node asked is answered with what the
// coordinator asks of it (the cache names it last reported that no catalog
// entry wants), and the agent posts back what it did. The node applies
// every rule again itself (weights/gc); the coordinator's list is only a
// request, and "asked to remove" is all it can ever say.

// gcWaitIntervals is how many report intervals a gc request is handed out
// for: every live agent reports within one, and a second covers a report
// that was under way when the request was made.
const gcWaitIntervals = 2

// MaxGCFiles bounds a node's answer: far above any real cache, low enough
// that one answer cannot make the coordinator allocate without limit.
const MaxGCFiles = 2 * MaxWeights

// gcPending holds the gc requests still to be handed out, in memory, so
// that a report costs one atomic load while there are none (nearly always).
type gcPending struct {
	n  atomic.Int32 // len(reqs)
	mu sync.Mutex
	// reqs are in creation order; each keeps the nodes not yet handed it.
	reqs []*pendingGC
}

type pendingGC struct {
	id       string
	collect  bool
	force    bool
	trust    bool
	deadline time.Time
	nodes    map[string]bool
}

func (p *gcPending) add(st api.GCStatus) {
	pg := &pendingGC{id: st.ID, collect: st.Collect, force: st.Force, trust: st.Trust, deadline: st.Deadline, nodes: map[string]bool{}}
	for _, n := range st.Nodes {
		pg.nodes[n.Node] = true
	}
	if len(pg.nodes) == 0 {
		return
	}
	p.mu.Lock()
	p.reqs = append(p.reqs, pg)
	p.n.Store(int32(len(p.reqs)))
	p.mu.Unlock()
}

// take returns the oldest request still to be handed to node and marks it
// handed; expired requests are dropped on the way. One request per report:
// a second one waits for the node's next report.
func (p *gcPending) take(node string, now time.Time) *pendingGC {
	if p.n.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var got *pendingGC
	keep := p.reqs[:0]
	for _, r := range p.reqs {
		if !now.Before(r.deadline) {
			continue
		}
		if got == nil && r.nodes[node] {
			delete(r.nodes, node)
			got = r
		}
		if len(r.nodes) > 0 {
			keep = append(keep, r)
		}
	}
	clear(p.reqs[len(keep):])
	p.reqs = keep
	p.n.Store(int32(len(p.reqs)))
	return got
}

// loadGC reads the requests a previous run of the coordinator had not
// handed out yet.
func (s *Server) loadGC(ctx context.Context) error {
	pend, err := s.db.PendingGC(ctx, s.now())
	if err != nil {
		return err
	}
	for _, st := range pend {
		s.gc.add(st)
	}
	return nil
}

var gcIDRE = regexp.MustCompile(`^[0-9a-f-]{1,64}$`)

func (s *Server) postGC(w http.ResponseWriter, r *http.Request) error {
	var req api.GCRequest
	if err := decode(w, r, MaxModelBytes, "gc request", &req); err != nil {
		return err
	}
	if req.Force && !req.Collect {
		return api.Errorf(api.CodeInvalid, "force without collect: a listing removes nothing, so there is nothing to force; ask for collect and force together")
	}
	now := s.now().UTC()
	st := api.GCStatus{ID: uuid.NewString(), Collect: req.Collect, Node: req.Node, Force: req.Force, Trust: req.Trust, Created: now,
		Deadline: now.Add(gcWaitIntervals * s.cfg.ReportInterval), Nodes: []api.GCNode{}}
	s.view.mu.RLock()
	if req.Node != "" {
		if _, ok := s.view.nodes[req.Node]; ok {
			st.Nodes = append(st.Nodes, api.GCNode{Node: req.Node, Asked: []string{}})
		}
	} else {
		for _, n := range s.view.names {
			st.Nodes = append(st.Nodes, api.GCNode{Node: n, Asked: []string{}})
		}
	}
	s.view.mu.RUnlock()
	if req.Node != "" {
		if err := api.ValidNodeName(req.Node); err != nil {
			return api.Errorf(api.CodeInvalid, "gc request: %v", err)
		}
		if len(st.Nodes) == 0 {
			return api.Errorf(api.CodeNotFound, "node %s has never reported, so it cannot be asked; 'llmgw status' lists the nodes", req.Node)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	if req.Trust {
		// Recorded with the catalog, not only handed to the nodes that
		// report in the next two intervals: a node down now adopts it when
		// it next reads the catalog.
		if err := s.trustCatalog(ctx); err != nil {
			return err
		}
	}
	if err := s.db.CreateGC(ctx, st); err != nil {
		s.metrics.dbErrors.WithLabelValues("gc").Inc()
		return api.Errorf(api.CodeUnavailable, "the gc request could not be stored (database: %v)", err)
	}
	s.gc.add(st)
	s.log.WithFields(map[string]any{"gc": st.ID, "collect": st.Collect, "nodes": len(st.Nodes)}).Info("gc requested")
	writeJSON(w, http.StatusCreated, st)
	return nil
}

// trustCatalog records an admin's adoption of the catalog as it stands
// (llmgw gc --trust) and reloads the view, whose catalog answer carries it.
func (s *Server) trustCatalog(ctx context.Context) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	change, err := s.db.TrustCatalog(ctx, s.now())
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("gc").Inc()
		return api.Errorf(api.CodeUnavailable, "the catalog's adoption could not be stored (database: %v)", err)
	}
	if err := s.view.load(ctx, s.db); err != nil {
		return api.Errorf(api.CodeUnavailable, "the catalog's adoption was stored, but reading the state back failed: %v", err)
	}
	s.log.WithField("change", change).Info("catalog adopted by an admin (gc --trust): nodes that distrust it trust it from their next catalog read")
	return nil
}

// gcRequestID is the {id} of a /v1/gc/{id} route, checked against the
// shape of the ids this coordinator gives out before any lookup.
func gcRequestID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !gcIDRE.MatchString(id) {
		return "", api.Errorf(api.CodeInvalid, "gc request id %.80q is not one this coordinator gives out", id)
	}
	return id, nil
}

func (s *Server) getGC(w http.ResponseWriter, r *http.Request) error {
	id, err := gcRequestID(r)
	if err != nil {
		return err
	}
	st, err := s.db.GC(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeNotFound, "no gc request %s (requests are kept for a week)", id)
	}
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("read").Inc()
		return api.Errorf(api.CodeUnavailable, "the gc request could not be read (database: %v)", err)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) postGCAnswer(w http.ResponseWriter, r *http.Request) error {
	id, err := gcRequestID(r)
	if err != nil {
		return err
	}
	var a api.GCAnswer
	if err := decode(w, r, MaxReportBytes, "gc answer", &a); err != nil {
		return err
	}
	if err := validGCAnswer(&a); err != nil {
		return err
	}
	if err := s.speaksFor(r, a.Node); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	err = s.db.AnswerGC(ctx, id, a, s.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, store.ErrConflict):
		return api.Errorf(api.CodeConflict, "%v", err)
	case err != nil:
		s.metrics.dbErrors.WithLabelValues("gc").Inc()
		return api.Errorf(api.CodeUnavailable, "the gc answer could not be stored (database: %v)", err)
	}
	s.log.WithFields(map[string]any{"gc": id, "node": a.Node, "files": len(a.Files), "freed_bytes": a.Freed, "held": a.Held}).Info("gc answered")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// validGCAnswer checks a node's answer and clips its free text. The names
// are the node's report of what it was asked, possibly hostile strings a
// coordinator was tricked into sending: stored and shown, never used as
// paths here.
func validGCAnswer(a *api.GCAnswer) error {
	if err := api.ValidNodeName(a.Node); err != nil {
		return api.Errorf(api.CodeInvalid, "gc answer: %v", err)
	}
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeInvalid, "gc answer from %s: "+format, append([]any{a.Node}, args...)...)
	}
	if len(a.Files) > MaxGCFiles {
		return bad("lists %d files; the limit is %d", len(a.Files), MaxGCFiles)
	}
	if a.Freed < 0 {
		return bad("freed bytes are negative")
	}
	a.Held = clip(a.Held, maxErrorText)
	a.CacheDir = clip(a.CacheDir, MaxPath)
	seen := make(map[string]bool, len(a.Files))
	for i := range a.Files {
		f := &a.Files[i]
		switch f.Action {
		case "listed", "removed", "kept", "refused", "failed", "evicted":
		default:
			return bad("files[%d]: action %q is not listed, removed, kept, refused, failed or evicted", i, f.Action)
		}
		f.Name, f.Path = clip(f.Name, MaxPath), clip(f.Path, MaxPath)
		f.Reason = clip(f.Reason, maxErrorText)
		if seen[f.Name] {
			return bad("lists %q twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 {
			return bad("files[%d] has negative size", i)
		}
	}
	return nil
}

// gcAsk is what to ask node in the answer to the report just stored, or
// nil. It marks the request handed to node (in the store too) before the
// answer is written: an agent that misses the answer is named as not
// answering, never asked twice.
func (s *Server) gcAsk(ctx context.Context, node string) *api.GCAsk {
	pg := s.gc.take(node, s.now())
	if pg == nil {
		return nil
	}
	// The request is taken: its reads and its record must not be cut short
	// by the agent hanging up. The timer is made only here, not for every
	// report.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	names, err := s.unwanted(ctx, node)
	log := s.log.WithFields(map[string]any{"gc": pg.id, "node": node})
	if err != nil {
		// Asking for nothing is safe; the node still answers, and says so.
		log.WithError(err).Warn("gc: reading the node's presence failed; asking it to remove nothing")
		names = []string{}
	}
	if err := s.db.HandGC(ctx, pg.id, node, names, s.now()); err != nil {
		s.metrics.dbErrors.WithLabelValues("gc").Inc()
		log.WithError(err).Error("gc: recording the request as handed failed; not handing it")
		return nil
	}
	log.WithField("asked", len(names)).Info("gc handed to node")
	return &api.GCAsk{ID: pg.id, Collect: pg.collect, Force: pg.force, Trust: pg.trust, Remove: names}
}

// unwanted lists the cache names node last reported in its cache directory
// that no catalog entry wants. It is the coordinator's view, which may be
// stale or wrong: the node decides.
func (s *Server) unwanted(ctx context.Context, node string) ([]string, error) {
	s.view.mu.RLock()
	n := s.view.nodes[node]
	var cacheDir string
	if n != nil {
		cacheDir = filepath.Clean(n.cacheDir)
	}
	wanted := catalog.WantedCacheNames(s.view.cat.Models)
	s.view.mu.RUnlock()
	names := []string{}
	if n == nil || n.cacheDir == "" {
		return names, nil
	}
	ps, err := s.db.NodePresence(ctx, node)
	if err != nil {
		return names, err
	}
	for _, p := range ps {
		dir, name := filepath.Split(filepath.Clean(p.Path))
		if _, want := wanted[name]; filepath.Clean(dir) == cacheDir && catalog.IsCacheName(name) && !want {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}
