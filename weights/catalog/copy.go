package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/jsonlite"
)

// Copy is the file the agent writes to its state directory each time it
// reads the catalog from the coordinator, so the hooks can resolve a model
// name while the coordinator is down, and the hook's fast path can resolve
// one without any network at all.
type Copy struct {
	// Coordinator is where the catalog came from.
	Coordinator string `json:"coordinator"`
	// Fetched is when the coordinator last answered with it.
	Fetched time.Time `json:"fetched"`
	Models  []Model   `json:"models"`

	// CatalogID and Generation are the coordinator's for these models (see
	// api.Models); empty from a coordinator older than them.
	CatalogID  string `json:"catalog_id,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// TrustedID and TrustedGeneration are the catalog this node last
	// collected against or saw grow from it: the anchor a new catalog is
	// judged by (see Refreshed and Distrust). They move only forward, along
	// one identity, or when an operator forces a gc.
	TrustedID         string `json:"trusted_catalog_id,omitempty"`
	TrustedGeneration int64  `json:"trusted_generation,omitempty"`
	// TrustedChange is the id of the change the anchor is at, when the
	// coordinator keeps a history (api.Models.History): a later catalog is
	// trusted when its History holds it, never for its generation alone.
	TrustedChange string `json:"trusted_change,omitempty"`
	// History is the coordinator's recent change ids, newest first.
	History []string `json:"history,omitempty"`
	// Adopted and AdoptedAt are the change an admin adopted with `llmgw
	// gc --trust`, and when (api.Models.Trusted).
	Adopted   string    `json:"adopted_change,omitempty"`
	AdoptedAt time.Time `json:"adopted_at,omitzero"`
	// DistrustSince is when this node began to distrust the catalog;
	// zero while it trusts it.
	DistrustSince time.Time `json:"distrust_since,omitzero"`

	// Superseded are cache names an admin's own change dropped from a
	// model still or once in the catalog (a source replaced by models add,
	// an entry removed by models rm), each with the model that wanted it:
	// the coordinator's record (api.Models.Superseded). gc removes them
	// without counting them against gc_max_share, and eviction takes them
	// right after what nothing ever wanted.
	Superseded map[string]string `json:"superseded,omitempty"`
}

// SupersededBy says whether the cache name was dropped from a model by an
// admin's change, and from which.
func (c Copy) SupersededBy(name string) (string, bool) {
	m, ok := c.Superseded[name]
	return m, ok
}

// Refreshed returns next, a catalog just read from a coordinator, with the
// trust this node had in prev, the copy it replaces. next becomes trusted
// when nothing was trusted yet, or when it is the trusted catalog at the
// same or a later generation; otherwise the old anchor stays and Distrust
// says why, until an operator forces a gc (Trusted). A node must not learn
// to trust a catalog that shrank merely by reading it.
func (next Copy) Refreshed(prev Copy) Copy {
	next.TrustedID, next.TrustedGeneration, next.TrustedChange = prev.TrustedID, prev.TrustedGeneration, prev.TrustedChange
	next.DistrustSince = prev.DistrustSince
	switch {
	case next.CatalogID == "":
		// A coordinator that carries no identity: nothing to anchor to.
	case next.TrustedID == "", next.descends():
		next = next.Trusted()
	case next.Adopted != "" && slices.Contains(next.History, next.Adopted) &&
		(prev.DistrustSince.IsZero() || next.AdoptedAt.After(prev.DistrustSince)):
		// An admin adopted this catalog (llmgw gc --trust) after this
		// node began to distrust it: the node need not have been up then.
		next = next.Trusted()
	}
	if next.Distrust() == "" {
		next.DistrustSince = time.Time{}
	} else if next.DistrustSince.IsZero() {
		next.DistrustSince = next.Fetched
		if next.DistrustSince.IsZero() {
			next.DistrustSince = time.Now().UTC()
		}
	}
	return next
}

// descends says whether c is the trusted catalog, as it was or later: of
// the same identity, and, with a history, one that holds the change the
// anchor is at; without one (an older coordinator, or an anchor from
// before histories), at the same or a later generation.
func (c Copy) descends() bool {
	if c.CatalogID != c.TrustedID {
		return false
	}
	if c.TrustedChange != "" && len(c.History) > 0 {
		return slices.Contains(c.History, c.TrustedChange)
	}
	return c.Generation >= c.TrustedGeneration
}

// Trusted returns c with its own catalog as the anchor: what a forced gc
// leaves, after an operator said this catalog is the one.
func (c Copy) Trusted() Copy {
	c.TrustedID, c.TrustedGeneration = c.CatalogID, c.Generation
	c.TrustedChange = ""
	if len(c.History) > 0 {
		c.TrustedChange = c.History[0]
	}
	c.DistrustSince = time.Time{}
	return c
}

// Distrust says why gc must not collect against c, or "" when it may.
func (c Copy) Distrust() string {
	switch {
	case c.TrustedID == "":
		return ""
	case c.CatalogID != c.TrustedID:
		id := c.CatalogID
		if id == "" {
			id = "none"
		}
		return fmt.Sprintf("the catalog from %s has identity %s, not %s that this node collected against: another coordinator database (a fresh install, a wrong coordinator URL?), whose catalog may lack what this node's jobs use", c.Coordinator, id, c.TrustedID)
	case c.TrustedChange != "" && len(c.History) > 0 && !slices.Contains(c.History, c.TrustedChange):
		return fmt.Sprintf("the catalog from %s does not descend from the one this node collected against (change %s is not in its history: a coordinator database restored from a backup, or this node was away for more than %d changes)", c.Coordinator, c.TrustedChange, len(c.History))
	case (c.TrustedChange == "" || len(c.History) == 0) && c.Generation < c.TrustedGeneration:
		return fmt.Sprintf("the catalog from %s is at generation %d, older than generation %d that this node saw (a coordinator database restored from a backup?)", c.Coordinator, c.Generation, c.TrustedGeneration)
	}
	return ""
}

// UpdateCopy writes next, a catalog just read from a coordinator, as the
// copy at path, carrying the trust of the copy it replaces (Refreshed). An
// unreadable old copy carries none.
func UpdateCopy(path string, next Copy) (Copy, error) {
	prev, _ := ReadCopy(path)
	next = next.Refreshed(prev)
	if next.Models == nil {
		next.Models = []Model{}
	}
	// The private copy first: a Prolog must never find a public copy newer
	// than the private one it fetches from (PrivateCopyPath).
	if err := WritePrivateCopy(path, next); err != nil {
		return next, err
	}
	return next, WriteCopy(path, next)
}

// ReadCopy reads a catalog copy the agent wrote.
func ReadCopy(path string) (Copy, error) {
	var c Copy
	b, err := ReadRegular(path)
	if err != nil {
		return c, fmt.Errorf("catalog copy: %w", err)
	}
	// The hook's fast path reads this on every job start; decodeCopy spares
	// it encoding/json's reflection, and declines anything it is not sure
	// of, which encoding/json then reads (or rejects) as it always did.
	if c, ok := decodeCopy(b); ok {
		return c, nil
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("catalog copy %s: %w", path, err)
	}
	return c, nil
}

// WriteCopy writes c to path atomically (see WriteAtomic), readable by all,
// since the TaskProlog reads it as the job's user; so every source is
// written through RedactQuery, which keeps a signed URL's signature out
// and names the same cache file. The whole catalog goes to
// WritePrivateCopy.
func WriteCopy(path string, c Copy) error {
	c.Models = append([]Model(nil), c.Models...)
	for i := range c.Models {
		c.Models[i] = c.Models[i].MapSources(RedactQuery)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(path, append(b, '\n'), 0o644)
}

// PrivateCopyPath is where the catalog copy with whole sources is kept
// beside the world-readable one at path.
func PrivateCopyPath(path string) string {
	return strings.TrimSuffix(path, ".json") + ".private.json"
}

// WritePrivateCopy writes c, sources whole, to PrivateCopyPath(path) with
// mode 0600: what the Prolog, as root, fetches from when the coordinator
// does not answer.
func WritePrivateCopy(path string, c Copy) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(PrivateCopyPath(path), append(b, '\n'), 0o600)
}

// Lookup returns the catalog entry called name.
func (c Copy) Lookup(name string) (Model, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return Model{}, false
}

// WriteAtomic writes data to path so that a reader sees the old file or the
// new one, never a torn one: a temporary file beside it, fsynced, renamed
// over it, and the directory fsynced so the rename survives a crash. A hook
// reading a half-written catalog during a power cut would otherwise find no
// models at exactly the moment it needs them. The directory is created when
// missing.
func WriteAtomic(path string, data []byte, perm os.FileMode) error {
	return replace(path, data, perm, true)
}

// replace writes data to a temporary file beside path and renames it over
// path, so a reader sees the old file or the new one; durable adds the
// fsyncs of the file and of the directory that make the rename survive a
// crash.
func replace(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := createTemp(path)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	// The temporary file is made 0600 whatever perm says; the umask must
	// not decide who may read it either.
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// decodeCopy decodes a catalog copy as json.Unmarshal does, or returns
// false; see package jsonlite. copy_test.go's fuzz test holds the two equal.
func decodeCopy(b []byte) (Copy, bool) {
	var c Copy
	s := jsonlite.New(b)
	ok := s.Object(func(name string) bool {
		switch name {
		case "coordinator":
			v, ok := s.String()
			c.Coordinator = v
			return ok
		case "fetched":
			return decodeTime(s, &c.Fetched)
		case "models":
			c.Models = []Model{}
			return s.Array(func() bool {
				m, ok := decodeModel(s)
				c.Models = append(c.Models, m)
				return ok
			})
		case "catalog_id":
			v, ok := s.String()
			c.CatalogID = v
			return ok
		case "generation":
			v, ok := s.Int(64)
			c.Generation = v
			return ok
		case "trusted_catalog_id":
			v, ok := s.String()
			c.TrustedID = v
			return ok
		case "trusted_generation":
			v, ok := s.Int(64)
			c.TrustedGeneration = v
			return ok
		case "trusted_change":
			v, ok := s.String()
			c.TrustedChange = v
			return ok
		case "history":
			v, ok := s.Strings()
			c.History = v
			return ok
		case "adopted_change":
			v, ok := s.String()
			c.Adopted = v
			return ok
		case "adopted_at":
			return decodeTime(s, &c.AdoptedAt)
		case "distrust_since":
			return decodeTime(s, &c.DistrustSince)
		case "superseded":
			c.Superseded = map[string]string{}
			return s.Object(func(name string) bool {
				v, ok := s.String()
				c.Superseded[name] = v
				return ok
			})
		}
		return jsonlite.Unknown(name, "coordinator", "fetched", "models", "catalog_id", "generation", "trusted_catalog_id", "trusted_generation", "superseded",
			"trusted_change", "history", "adopted_change", "adopted_at", "distrust_since") && s.Skip()
	})
	return c, ok && s.End()
}

func decodeModel(s *jsonlite.Scanner) (Model, bool) {
	var m Model
	ok := s.Object(func(name string) bool {
		var ok bool
		switch name {
		case "name":
			m.Name, ok = s.String()
		case "source":
			m.Source, ok = s.String()
		case "size_bytes":
			m.Size, ok = s.Int(64)
		case "sha256":
			m.SHA256, ok = s.String()
		case "gpu_memory_bytes":
			m.GPUMemory, ok = s.Int(64)
		case "pinned_sha256":
			m.Pinned, ok = s.String()
		case "pinned_etag":
			m.PinnedETag, ok = s.String()
		case "created":
			ok = decodeTime(s, &m.Created)
		case "updated":
			ok = decodeTime(s, &m.Updated)
		case "files":
			m.Files = []File{}
			ok = s.Array(func() bool {
				f, ok := decodeFile(s)
				m.Files = append(m.Files, f)
				return ok
			})
		case "hub":
			m.Hub = &Hub{}
			ok = decodeHub(s, m.Hub)
		default:
			ok = jsonlite.Unknown(name, "name", "source", "size_bytes", "sha256", "gpu_memory_bytes", "pinned_sha256", "pinned_etag", "created", "updated", "files", "hub") && s.Skip()
		}
		return ok
	})
	return m, ok
}

func decodeFile(s *jsonlite.Scanner) (File, bool) {
	var f File
	ok := s.Object(func(name string) bool {
		var ok bool
		switch name {
		case "source":
			f.Source, ok = s.String()
		case "size_bytes":
			f.Size, ok = s.Int(64)
		case "sha256":
			f.SHA256, ok = s.String()
		case "pinned_sha256":
			f.Pinned, ok = s.String()
		case "pinned_etag":
			f.PinnedETag, ok = s.String()
		default:
			ok = jsonlite.Unknown(name, "source", "size_bytes", "sha256", "pinned_sha256", "pinned_etag") && s.Skip()
		}
		return ok
	})
	return f, ok
}

// decodeHub reads a Model's Hub into h, as encoding/json does.
func decodeHub(s *jsonlite.Scanner, h *Hub) bool {
	return s.Object(func(name string) bool {
		var ok bool
		switch name {
		case "repo":
			h.Repo, ok = s.String()
		case "revision":
			h.Revision, ok = s.String()
		case "commit":
			h.Commit, ok = s.String()
		case "include":
			h.Include, ok = s.Strings()
		case "exclude":
			h.Exclude, ok = s.Strings()
		case "listed":
			h.Listed, ok = s.Bool()
		case "files":
			h.Files = []HubFile{}
			ok = s.Array(func() bool {
				var f HubFile
				ok := s.Object(func(name string) bool {
					var ok bool
					switch name {
					case "path":
						f.Path, ok = s.String()
					case "size_bytes":
						f.Size, ok = s.Int(64)
					case "sha256":
						f.SHA256, ok = s.String()
					case "blob":
						f.Blob, ok = s.String()
					default:
						ok = jsonlite.Unknown(name, "path", "size_bytes", "sha256", "blob") && s.Skip()
					}
					return ok
				})
				h.Files = append(h.Files, f)
				return ok
			})
		default:
			ok = jsonlite.Unknown(name, "repo", "revision", "commit", "include", "exclude", "listed", "files") && s.Skip()
		}
		return ok
	})
}

// decodeTime reads a time as encoding/json does: time.Time's own
// UnmarshalJSON on the string token.
func decodeTime(s *jsonlite.Scanner, t *time.Time) bool {
	raw, ok := s.RawString()
	return ok && t.UnmarshalJSON(raw) == nil
}
