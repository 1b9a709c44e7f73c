package coordinator

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/weights/catalog"
)

// MaxPinBytes bounds a pin request: a source, a digest and a validator.
const MaxPinBytes = 16 << 10

// MaxPinETag bounds the origin's validator a pin records: it is shown in
// `llmgw models list` and in every pin mismatch, and the fetcher keeps at
// most 256 bytes of it.
const MaxPinETag = 512

// routePins registers the pin endpoints: POST /v1/pins (agent token), what
// a node's first verified fetch of an undeclared source got; DELETE
// /v1/pins/{name} (admin token), forget a pin so the next fetch pins anew.
func (s *Server) routePins(mux *http.ServeMux) {
	s.route(mux, "POST /v1/pins", roleAgent, s.postPin)
	s.route(mux, "DELETE /v1/pins/{name}", roleAdmin, s.deletePin)
}

func (s *Server) postPin(w http.ResponseWriter, r *http.Request) error {
	var p api.PinRequest
	if err := decode(w, r, MaxPinBytes, "pin", &p); err != nil {
		return err
	}
	// A pin decides the bytes every node loads: with munge, only the node
	// it names (from one of its addresses) may set it, as for a report.
	if err := s.speaksFor(r, p.Node); err != nil {
		return err
	}
	p.SHA256 = strings.ToLower(p.SHA256)
	switch {
	case !catalog.ValidSHA256(p.SHA256):
		return api.Errorf(api.CodeInvalid, "pin of %s: sha256 must be 64 hex digits", api.RedactSource(p.Source))
	case catalog.KindOf(p.Source) != catalog.KindRemote:
		return api.Errorf(api.CodeInvalid, "pin of %s: only a fetched (hf: or http(s)) source is pinned", api.RedactSource(p.Source))
	case len(p.ETag) > MaxPinETag:
		return api.Errorf(api.CodeInvalid, "pin of %s: the origin's validator is %d bytes; at most %d are kept", api.RedactSource(p.Source), len(p.ETag), MaxPinETag)
	}
	var stored api.Model
	var conflict *store.PinConflict
	err := s.changeCatalog(r.Context(), func(ctx context.Context) error {
		var err error
		stored, err = s.db.Pin(ctx, p.Source, p.SHA256, api.StripControl(p.ETag), api.StripControl(p.Node), s.now())
		if errors.As(err, &conflict) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if conflict != nil {
		m := conflict.Model
		s.log.WithFields(map[string]any{"model": m.Name, "source": api.RedactSource(conflict.Source), "pinned": conflict.Pinned, "pinned_origin": conflict.PinnedETag,
			"offered": p.SHA256, "offered_origin": api.StripControl(p.ETag), "node": p.Node}).Warn("a node fetched other bytes than the model is pinned to")
		return api.Errorf(api.CodeConflict, "%s", catalog.PinMismatch(m.Name, api.RedactSource(conflict.Source), conflict.Pinned, conflict.PinnedETag, p.SHA256))
	}
	if !s.mayFetch(r) {
		stored = stored.MapSources(api.RedactSource)
	}
	writeJSON(w, http.StatusOK, stored)
	return nil
}

func (s *Server) deletePin(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := catalog.ValidModelName(name); err != nil {
		return api.Errorf(api.CodeInvalid, "%v", err)
	}
	var m catalog.Model
	s.view.mu.RLock()
	if i, ok := s.view.cat.Index(name); ok {
		m = s.view.cat.Models[i]
	}
	s.view.mu.RUnlock()
	if m.IsHub() {
		// An llmgw older than Hub models asks this of every repin.
		return api.Errorf(api.CodeInvalid, "model %s is Hugging Face repository %s at commit %s: it has no pin to forget; a repin resolves its revision (%s) again, "+
			"which 'llmgw models repin %s' of an llmgw that knows Hub models does", name, m.Hub.Repo, m.Hub.Commit, m.Hub.Revision, name)
	}
	if err := s.changeCatalog(r.Context(), func(ctx context.Context) error { return s.db.Unpin(ctx, name) }); err != nil {
		return err
	}
	s.log.WithField("model", name).Info("pin forgotten; the next verified fetch pins again")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
