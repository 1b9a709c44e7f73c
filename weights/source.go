// Package weights makes a model's files present on a node and says which
// ones already are.
//
// The simple arrangement, and the default: every node has its own copy. A
// source that is already a local path is used as it stands; one that names a
// remote file is fetched into a cache directory once and reused. Nothing here
// manages storage, decides a retention policy, or mounts anything: weights on
// a shared filer, an image exported over the fabric, or anything else an
// operator has put in place are simply present, and present means there is
// nothing to do.
//
// This package imports no other llmgw package: the agent, the hooks and the
// coordinator all build on it, and it must stay usable on its own.
package weights

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"path/filepath"
	"strings"
)

// Kind says what a source names and therefore what Ensure does with it.
type Kind int

const (
	// KindInvalid is the empty source.
	KindInvalid Kind = iota
	// KindPath is a file or directory on this machine ("/", "./" or "../").
	// It is checked, never fetched.
	KindPath
	// KindRemote is an "hf:" or "http(s)://" source, fetched into the cache.
	KindRemote
	// KindModelID is a bare model id ("Qwen/Qwen2.5-7B-Instruct"), passed
	// through to the engine, which resolves it itself.
	KindModelID
)

func (k Kind) String() string {
	switch k {
	case KindPath:
		return "path"
	case KindRemote:
		return "remote"
	case KindModelID:
		return "model-id"
	}
	return "invalid"
}

// KindOf classifies a source by its spelling alone; it does no I/O.
//
// A path is recognised by its leading characters because that is the only
// honest signal: "Qwen/Qwen2.5-7B-Instruct" and "models/qwen.gguf" are the same
// shape of string, and an operator naming a local file writes it absolutely.
// Being wrong in this direction hands a relative path to the engine untouched,
// which is what happened before llmgw existed.
func KindOf(source string) Kind {
	switch {
	case source == "":
		return KindInvalid
	case strings.HasPrefix(source, "/"),
		strings.HasPrefix(source, "./"),
		strings.HasPrefix(source, "../"):
		return KindPath
	case strings.HasPrefix(source, "hf:"),
		strings.HasPrefix(source, "http://"),
		strings.HasPrefix(source, "https://"):
		return KindRemote
	}
	return KindModelID
}

// cacheHashLen is how many hex digits of the source's sha256 lead a cache
// name: 64 bits, ample to keep the sources of one cluster apart, short enough
// that an operator listing the directory can still read the file name.
const cacheHashLen = 16

// CachePathFor is where a remote source lands in cacheDir.
//
// The name is a hash of the whole source followed by the source's own file
// name: two models with the same file name from different places cannot
// collide, a human listing the directory can still tell what is in it, and
// anyone holding the catalog can compute the set of wanted names exactly. gc
// depends on that last property: a file without this shape was not put there
// by llmgw and is never deleted by it.
func CachePathFor(cacheDir, source string) string {
	return filepath.Join(cacheDir, cacheName(source))
}

func cacheName(source string) string {
	sum := sha256.Sum256([]byte(source))
	return hex.EncodeToString(sum[:])[:cacheHashLen] + "-" + sourceBase(source)
}

// sourceBase is the file name a remote source ends in, reduced to something
// safe to put in a directory: query strings, fragments and separators go.
func sourceBase(source string) string {
	s := source
	if i := strings.IndexAny(s, "?#"); i >= 0 && !strings.HasPrefix(s, "hf:") {
		s = s[:i]
	}
	base := path.Base(strings.TrimRight(s, "/"))
	base = strings.Map(func(r rune) rune {
		switch {
		case r == '/' || r == '\\' || r == 0 || r == '\n':
			return '_'
		}
		return r
	}, base)
	if base == "" || base == "." || base == ".." || strings.HasSuffix(base, ":") {
		base = "download"
	}
	if len(base) > 200 {
		base = base[len(base)-200:]
	}
	return base
}

// IsCacheName reports whether a file name has the shape CachePathFor gives:
// sixteen lowercase hex digits, a dash, and a name. It is the test the node
// applies before it will delete anything, so the files of a fetch in
// progress (.part, its .ranges record and that record's temporary file)
// are not cache names: deleting them would destroy a download under way.
func IsCacheName(name string) bool {
	if len(name) < cacheHashLen+2 || name[cacheHashLen] != '-' {
		return false
	}
	for _, suffix := range []string{".part", ".part.ranges", ".part.ranges.tmp"} {
		if strings.HasSuffix(name, suffix) {
			return false
		}
	}
	for _, c := range name[:cacheHashLen] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	rest := name[cacheHashLen+1:]
	return rest != "." && rest != ".." && !strings.ContainsAny(rest, "/\x00")
}
