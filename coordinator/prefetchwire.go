package coordinator

import (
	"net/http"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/prefetch"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// The prefetcher (coordinator/prefetch) is wired here: it reads Slurm
// through its own runner and the presence model through prefetchView, and
// its asks ride on the answers to reports (ingest.go) as seed asks do.

func newPrefetcher(s *Server) *prefetch.Prefetcher {
	cfg := s.cfg
	r := &slurm.Runner{Paths: map[string]string{"scontrol": cfg.Scontrol, "squeue": squeuePath(cfg)}}
	if cfg.SlurmConf != "" {
		r.Env = []string{"SLURM_CONF=" + cfg.SlurmConf}
	}
	return prefetch.New(prefetch.Config{Horizon: cfg.PrefetchHorizon, MaxBytes: cfg.PrefetchMaxBytes,
		Interval: cfg.PrefetchInterval, ReportInterval: cfg.ReportInterval, WarmMax: cfg.PrefetchWarmMax},
		r, prefetchView{s}, s.log.WithField("part", "prefetch"), s.metrics.reg)
}

// getWarm answers burst_buffer.lua's question for a job that asked to wait
// for its weights (GET /v1/prefetch/jobs/{id}). With the prefetcher off
// nothing is fetched ahead, so nothing is worth waiting for: ready.
func (s *Server) getWarm(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !validJobID(id) {
		return api.Errorf(api.CodeInvalid, "job id %.40q: want a Slurm job id such as 1234", id)
	}
	q := r.URL.Query()
	model, nodes := q.Get("model"), q.Get("nodes")
	if model != "" {
		if err := catalog.ValidModelName(model); err != nil {
			return api.Errorf(api.CodeInvalid, "%v", err)
		}
	}
	if nodes != "" {
		ns, err := slurm.Expand(nodes)
		if err != nil || len(ns) > 100_000 {
			return api.Errorf(api.CodeInvalid, "nodes %.80q is not a hostlist", nodes)
		}
	}
	if s.prefetch == nil {
		writeJSON(w, http.StatusOK, api.WarmAnswer{Job: id, Model: model, Nodes: nodes, Ready: true,
			Why: "prefetch is off on this coordinator (it needs --features); nothing to wait for"})
		return nil
	}
	writeJSON(w, http.StatusOK, s.prefetch.Warm(id, model, nodes))
	return nil
}

func validJobID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// prefetchView is the presence model as the prefetcher reads it.
type prefetchView struct{ s *Server }

func (v prefetchView) Model(name string) (prefetch.Model, bool) {
	s := v.s
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	i, ok := s.view.cat.Index(name)
	if !ok {
		return prefetch.Model{}, false
	}
	m := s.view.cat.Models[i]
	pm := prefetch.Model{Name: m.Name, Source: m.Source, SHA256: m.WantSHA256(), Size: m.Size}
	// A model of several files and a Hub repository are asked by name and
	// source like any model; the agent fetches them as its catalog copy
	// has them (agent/prefetchkinds.go). Their size is the whole model's,
	// what prefetch_max_bytes counts.
	switch {
	case m.IsHub():
		pm.SHA256, pm.Size = "", catalog.HubSize(*m.Hub)
	case m.IsSet():
		pm.SHA256, pm.Size = "", setSize(m)
	}
	switch {
	case catalog.KindOf(m.Source) == catalog.KindPath:
		pm.Why = "a path, which nodes see or not: never fetched"
	case catalog.KindOf(m.Source) != catalog.KindRemote:
		pm.Why = "a model id the engine resolves itself: never fetched"
	}
	return pm, true
}

func (v prefetchView) Node(name string) (prefetch.Node, bool) {
	s := v.s
	now := s.now()
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	vn := s.view.nodes[name]
	if vn == nil {
		return prefetch.Node{}, false
	}
	n := prefetch.Node{Fresh: vn.State(now, s.staleAfter) != placement.StateStale, CacheDir: vn.cacheDir, CacheFree: vn.CacheFree}
	// Read now, under the lock: the prefetcher calls these right away.
	holds := map[string]bool{}
	for _, m := range vn.Holdings {
		holds[m.Model] = vn.Holding(m.Model).Hold != placement.HoldNone
	}
	done := map[string]int64{}
	for _, f := range vn.Fetches {
		done[f.Source] = f.Done
	}
	n.Holds = func(model string) bool { return holds[model] }
	n.Done = func(source string) int64 { return done[source] }
	return n, true
}

// setSize is the bytes of every file of the set m, or 0 when the catalog
// does not give one of them (the agent asks the origin when it claims the
// set's room; prefetch_max_bytes cannot count what it does not know).
func setSize(m catalog.Model) int64 {
	var n int64
	for _, f := range m.Files {
		if f.Size <= 0 {
			return 0
		}
		n += f.Size
	}
	return n
}
