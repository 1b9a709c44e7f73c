// Package catalog holds the rules every part of llmgw applies to catalog
// entries and to the files they name: what a model name may be, what kind of
// thing a source is, where a fetched source lands in the cache and what a
// cache name looks like, the names of a fetch still under way, which file
// names are weights, and the node-local copy of the catalog that the Slurm
// hooks read.
//
// The store, the coordinator, the agent, placement, gc and the hooks all
// apply these rules, and each must apply them identically: gc deletes only
// what CachePathFor could have produced, and the hook finds a fetched file
// only where the fetcher put it. So they live once, here, in a package that
// imports only the standard library (and internal/jsonlite, the hook's
// reflection-free JSON reader, itself standard library only): the hook
// binary, which starts on every job, links this and not the fetcher, the
// scanner or net/http.
package catalog

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Model is one catalog entry.
type Model struct {
	// Name is restricted to what a Slurm feature name can carry in a job's
	// --constraint or --prefer, so that a job can name the model there; see
	// ValidModelName.
	Name string `json:"name"`
	// Source is a path, an hf:org/repo[@rev]/file, an http(s) URL, or a bare
	// model id that the engine resolves itself; see KindOf.
	Source    string    `json:"source"`
	Size      int64     `json:"size_bytes,omitempty"`
	SHA256    string    `json:"sha256,omitempty"`
	GPUMemory int64     `json:"gpu_memory_bytes,omitempty"`
	Created   time.Time `json:"created,omitzero"`
	Updated   time.Time `json:"updated,omitzero"`

	// Pinned is the sha256 the coordinator recorded from the first
	// verified fetch of a remote source declared without SHA256, and
	// PinnedETag the origin's validator for those bytes when the fetch
	// reported one. Every later fetch verifies against it; see WantSHA256.
	Pinned     string `json:"pinned_sha256,omitempty"`
	PinnedETag string `json:"pinned_etag,omitempty"`

	// Files, when set, makes the model a set of several remote files
	// fetched together into one directory (see set.go). Source is then
	// the first file's source, so that a reader that knows no Files still
	// names the model by a source of its own, and SHA256 and Pinned are
	// empty: each file carries its own.
	Files []File `json:"files,omitempty"`

	// Hub, when set, makes the model a Hugging Face repository at one
	// commit, fetched into the layout huggingface_hub writes (see hub.go).
	// Source is then HubSource(Hub.Repo, Hub.Commit), and SHA256, Pinned
	// and Files are empty: the commit pins the model, and each file
	// carries the digest the Hub publishes for it.
	Hub *Hub `json:"hub,omitempty"`
}

// DefaultFabric is the fabric of a node that names none: a cluster with one
// network needs no setting. A fabric is a set of nodes that copy from one
// another quickly, in practice an InfiniBand fabric and a Slurm feature; the
// agent's defaults and the coordinator's reading of reports must agree on it.
const DefaultFabric = "default"

// MaxModelName is the longest model name accepted. The name must fit in a
// Slurm feature and in --prefer expressions, which Slurm caps at 1024
// characters in all; 64 leaves room to combine several.
const MaxModelName = 64

// ValidModelName says why name cannot be a model name, or nil.
//
// Slurm accepts almost anything in a feature name through scontrol, but job
// expressions treat , | & * [ ] ( ) as syntax, so a model named with one of
// them could be set on nodes and never asked for.
func ValidModelName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("model name is empty")
	case len(name) > MaxModelName:
		return fmt.Errorf("model name %q is %d characters; the limit is %d, so that it fits in a Slurm feature expression", name, len(name), MaxModelName)
	case !modelNameChars(name):
		return fmt.Errorf("model name %q may contain only letters, digits, '.', '_' and '-', the characters a Slurm feature name can carry in a job's --constraint", name)
	}
	return nil
}

// modelNameChars reports whether name holds only [A-Za-z0-9._-]. A loop,
// not a regexp: the hook binary links this package, and a package-level
// regexp is compiled on every job start.
func modelNameChars(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidSHA256 reports whether s is a sha256 digest as the catalog spells
// it: 64 hexadecimal digits.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// ParseBytes reads a byte count as people write one: "14000000000", "14G",
// "14 GB" (decimal, as FormatBytes prints), or "13GiB" (binary). Empty is 0.
func ParseBytes(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.ToUpper(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	units := map[string]float64{
		"": 1, "B": 1,
		"K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KI": 1 << 10, "KIB": 1 << 10, "MI": 1 << 20, "MIB": 1 << 20, "GI": 1 << 30, "GIB": 1 << 30, "TI": 1 << 40, "TIB": 1 << 40,
	}
	mult, ok := units[unit]
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 || f*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte count; give bytes, e.g. 14000000000, 14G or 13GiB", s)
	}
	return int64(f * mult), nil
}

// FormatBytes formats n in decimal units, as disks and download tools count
// them: "14 GB", "1.5 MB", "512 B". Every size llmgw shows a person, in a
// table, an error or a log line, goes through it, so one model's size reads
// the same everywhere.
func FormatBytes(n int64) string {
	const unit = 1000
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB", "PB", "EB"} {
		v /= unit
		if (v < unit && v > -unit) || u == "EB" {
			if v < 10 && v > -10 {
				return fmt.Sprintf("%.1f %s", v, u)
			}
			return fmt.Sprintf("%.0f %s", v, u)
		}
	}
	return fmt.Sprintf("%d B", n)
}
