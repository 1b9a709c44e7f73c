package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

func (s *Server) getModels(w http.ResponseWriter, r *http.Request) error {
	// The view's copy is current: catalog writes reload it before they
	// answer, so a client that just wrote reads its own write.
	// It is what the catalog tag digests (catalogTag), so that a node
	// whose answers carry the same tag holds all of it.
	s.view.mu.RLock()
	out := s.view.catalogLocked()
	out.Models = append([]api.Model{}, out.Models...)
	s.view.mu.RUnlock()
	if !s.mayFetch(r) {
		for i := range out.Models {
			out.Models[i] = out.Models[i].MapSources(api.RedactSource)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// catalogTag is the catalog's tag as GET /v1/models serves it now.
func (s *Server) catalogTag() string {
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	return s.view.catTag
}

// mayFetch reports whether r comes from a caller trusted to fetch the
// catalog's sources (an agent, or an admin who set them): only such a caller
// is sent a source's query string, where signed URLs keep their signature.
// Reads are open by default (or need only the read token), so everyone
// else sees the source through api.RedactSource. With munge, a node's
// agent and the hooks speak as root (or agent_user) and admins by their uid;
// a node's own token is a node's. Any other cluster user reads redacted.
func (s *Server) mayFetch(r *http.Request) bool {
	if c := callerOf(r); c != nil {
		switch {
		case c.node != "":
			return true
		case c.munge && s.trust != nil:
			return s.trust.agents[c.uid] || s.trust.admin(c.uid, c.gid)
		}
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.tokens.roleOf(strings.TrimSpace(tok)) >= roleAgent
}

// validModel checks a catalog entry and says what is wrong with it.
func validModel(m *api.Model) error {
	if err := catalog.ValidModelName(m.Name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeInvalid, "model %s: %s", m.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Size < 0:
		return bad("size is negative")
	case m.GPUMemory < 0:
		return bad("GPU memory is negative")
	case m.Hub != nil:
		return validHub(m, bad)
	case len(m.Files) > 0:
		return validSet(m, bad)
	}
	if err := api.CheckSource(m.Source); err != nil {
		return bad("%v", err)
	}
	switch catalog.KindOf(m.Source) {
	case catalog.KindPath:
		// Nodes report clean paths, and two spellings of one path must
		// collide on the catalog's unique source, not become two models of
		// which one is never held.
		m.Source = filepath.Clean(m.Source)
	case catalog.KindRemote:
		// Fetched into a cache file named after the source's file; a name
		// no scan takes for weights would be fetched and never seen as held.
		if name := catalog.CacheName(m.Source); !catalog.IsWeightName(name) {
			return bad("source %q does not name a weight file (.gguf, .safetensors, .bin, .pt or .pth), so a fetched copy would never count as held; name the file itself", m.Source)
		}
	}
	m.SHA256 = strings.ToLower(m.SHA256)
	if m.SHA256 != "" && !catalog.ValidSHA256(m.SHA256) {
		return bad("sha256 must be 64 hex digits")
	}
	return nil
}

// validSet checks a model of several files (weights/catalog/set.go): each
// file's source as any source is checked, then the set as a whole. The
// model's source becomes its first file's, and its size, when not given
// and every file gives one, their sum (placement's disk check reads it).
func validSet(m *api.Model, bad func(string, ...any) error) error {
	var sum int64
	for i := range m.Files {
		f := &m.Files[i]
		if err := api.CheckSource(f.Source); err != nil {
			return bad("file %d: %v", i+1, err)
		}
		f.SHA256 = strings.ToLower(f.SHA256)
		f.Pinned, f.PinnedETag = "", "" // pins are the nodes' to report
		if sum >= 0 && f.Size > 0 {
			sum += f.Size
		} else {
			sum = -1
		}
	}
	if m.Source == "" {
		m.Source = m.Files[0].Source
	}
	if err := catalog.CheckSet(*m); err != nil {
		return bad("%v", err)
	}
	if m.Size == 0 && sum > 0 {
		m.Size = sum
	}
	return nil
}

// validHub checks a Hub model (weights/catalog/hub.go): the repository,
// the commit and every file as the node will use them, since each file
// becomes a path under every node's Hugging Face cache. The source becomes
// the repository at the commit, and the size, when not given, the files'.
func validHub(m *api.Model, bad func(string, ...any) error) error {
	if err := catalog.CheckHub(*m.Hub); err != nil {
		return bad("%v", err)
	}
	src := catalog.HubSource(m.Hub.Repo, m.Hub.Commit)
	switch {
	case m.Source != "" && m.Source != src:
		return bad("source %q is not the repository at its commit, %s", m.Source, src)
	case len(m.Files) > 0:
		return bad("a Hub repository lists its files in hub.files, not files")
	case m.SHA256 != "":
		return bad("a Hub repository is pinned by its commit, and each file by the Hub's digest; give no sha256")
	}
	m.Source = src
	m.Pinned, m.PinnedETag = "", ""
	if m.Size == 0 {
		m.Size = catalog.HubSize(*m.Hub)
	}
	return nil
}

func (s *Server) putModel(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	var m api.Model
	if err := decode(w, r, MaxCatalogEntryBytes, "model", &m); err != nil {
		return err
	}
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return api.Errorf(api.CodeInvalid, "the body names model %q but the URL names %q", m.Name, name)
	}
	if err := validModel(&m); err != nil {
		return err
	}
	var stored api.Model
	var created bool
	err := s.changeCatalog(r.Context(), func(ctx context.Context) error {
		var err error
		stored, created, err = s.db.PutModel(ctx, m, s.now())
		return err
	})
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	s.log.WithFields(map[string]any{"model": m.Name, "source": m.Source, "created": created}).Info("catalog entry stored")
	writeJSON(w, code, stored)
	return nil
}

func (s *Server) deleteModel(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := catalog.ValidModelName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	err := s.changeCatalog(r.Context(), func(ctx context.Context) error { return s.db.DeleteModel(ctx, name) })
	if err != nil {
		return err
	}
	s.log.WithField("model", name).Info("catalog entry removed")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) renameModel(w http.ResponseWriter, r *http.Request) error {
	old := r.PathValue("name")
	if err := catalog.ValidModelName(old); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	var req api.ModelRename
	if err := decode(w, r, MaxModelBytes, "model rename", &req); err != nil {
		return err
	}
	if err := catalog.ValidModelName(req.Name); err != nil {
		return api.Errorf(api.CodeInvalid, "new name: %v", err)
	}
	if req.Name == old {
		return api.Errorf(api.CodeInvalid, "model %s is already called that", old)
	}
	var m api.Model
	err := s.changeCatalog(r.Context(), func(ctx context.Context) error {
		var err error
		m, err = s.db.RenameModel(ctx, old, req.Name, s.now())
		return err
	})
	if err != nil {
		return err
	}
	s.log.WithFields(map[string]any{"model": req.Name, "was": old}).Info("catalog entry renamed")
	writeJSON(w, http.StatusOK, m)
	return nil
}

// changeCatalog runs a catalog write and reloads the view from the store,
// both under writeMu, and maps the store's errors to API errors.
func (s *Server) changeCatalog(ctx context.Context, change func(ctx context.Context) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	// The change must not be half-done because a client hung up.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := change(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%v; 'llmgw models list' shows the catalog", err)
	case errors.Is(err, store.ErrConflict):
		return api.Errorf(api.CodeConflict, "%s", strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error()))
	case err != nil:
		s.metrics.dbErrors.WithLabelValues("catalog").Inc()
		s.dbOK.Store(false)
		return api.Errorf(api.CodeUnavailable, "the catalog could not be changed (database: %v)", err)
	}
	s.dbOK.Store(true)
	if err := s.view.load(ctx, s.db); err != nil {
		s.metrics.dbErrors.WithLabelValues("read").Inc()
		return api.Errorf(api.CodeUnavailable, "the catalog was changed, but reloading the state failed (database: %v)", err)
	}
	s.features.poke()
	return nil
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) error {
	st := s.Status(s.now())
	if !s.mayFetch(r) {
		redactStatus(st)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) getModelStatus(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("model")
	if err := catalog.ValidModelName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	st, ok := s.ModelStatus(name, s.now())
	if !ok {
		return api.Errorf(api.CodeNotFound, "model %s is not in the catalog; 'llmgw models list' shows it", name)
	}
	if !s.mayFetch(r) {
		redactModelNodes(st)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// deleteNode forgets a node (llmgw nodes rm): one that left the cluster
// while Slurm's list is not read (no munge), or one an admin wants gone
// before forget_after. A node that still runs an agent comes back with its
// next report.
func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("node")
	if err := api.ValidNodeName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	gone, err := s.forget(r.Context(), []string{name})
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("nodes").Inc()
		return api.Errorf(api.CodeUnavailable, "node %s could not be removed (database: %v)", name, err)
	}
	if len(gone) == 0 {
		return api.Errorf(api.CodeNotFound, "node %s is not known to the coordinator; 'llmgw status' lists the nodes", name)
	}
	s.log.WithField("node", name).Info("node removed")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// postNodeToken makes a node's token (llmgw nodes token), for sites without
// munge: the agent of that node, and only it, reports with it. Making one
// again revokes the old one. The token is in this answer and nowhere else.
func (s *Server) postNodeToken(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("node")
	if err := api.ValidNodeName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	tok, err := s.newNodeToken(ctx, name)
	if err != nil {
		s.metrics.dbErrors.WithLabelValues("nodes").Inc()
		return api.Errorf(api.CodeUnavailable, "the token of node %s could not be stored (database: %v)", name, err)
	}
	s.log.WithField("node", name).Info("node token made")
	writeJSON(w, http.StatusCreated, api.NodeToken{Node: name, Token: tok})
	return nil
}
