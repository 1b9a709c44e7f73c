package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
		c.Models[i].Source = RedactQuery(c.Models[i].Source)
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
		}
		return jsonlite.Unknown(name, "coordinator", "fetched", "models") && s.Skip()
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
		default:
			ok = jsonlite.Unknown(name, "name", "source", "size_bytes", "sha256", "gpu_memory_bytes", "pinned_sha256", "pinned_etag", "created", "updated") && s.Skip()
		}
		return ok
	})
	return m, ok
}

// decodeTime reads a time as encoding/json does: time.Time's own
// UnmarshalJSON on the string token.
func decodeTime(s *jsonlite.Scanner, t *time.Time) bool {
	raw, ok := s.RawString()
	return ok && t.UnmarshalJSON(raw) == nil
}
