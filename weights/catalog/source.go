package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"path/filepath"
	"strings"
)

// Kind says what a source names and therefore what making it present means.
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

// The names of a fetch under way, beside its target: the bytes so far, the
// record of which ranges they cover (for a multi-connection resume), and
// that record's temporary file while it is rewritten. They are spelled here
// once because three parties must agree on them: the fetcher writes them,
// the scanner must not count them as weights, and gc must never delete them.
const (
	PartSuffix      = ".part"
	RangesSuffix    = PartSuffix + ".ranges"
	RangesTmpSuffix = RangesSuffix + ".tmp"
)

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
	return filepath.Join(cacheDir, CacheName(source))
}

// WantedCacheNames maps the cache name of every remote source among models
// to its model's name: the cache files the catalog wants, and the set
// directory (SetName) of every model of several files, which is wanted
// whole. Path and model-id sources are never fetched, so they want no
// cache file, and a Hub model's files live in the Hugging Face cache, not
// under a cache name. Node gc keeps these, and the coordinator asks a node
// to remove only others.
func WantedCacheNames(models []Model) map[string]string {
	w := make(map[string]string, len(models))
	for _, m := range models {
		switch {
		case m.IsHub():
		case m.IsSet():
			w[SetName(m)] = m.Name
		case KindOf(m.Source) == KindRemote:
			w[CacheName(m.Source)] = m.Name
		}
	}
	return w
}

// CacheName is the file name CachePathFor gives source, without a directory.
//
// The hash is of RedactQuery(source), so a source and its redacted form
// name the same file: the TaskProlog, which reads the node's world-readable
// catalog copy, finds the file the agent fetched from the signed URL it
// never sees.
func CacheName(source string) string {
	sum := sha256.Sum256([]byte(RedactQuery(source)))
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
// progress (PartSuffix, RangesSuffix, RangesTmpSuffix) are not cache names:
// deleting them would destroy a download under way.
func IsCacheName(name string) bool {
	if len(name) < cacheHashLen+2 || name[cacheHashLen] != '-' {
		return false
	}
	for _, suffix := range []string{PartSuffix, RangesSuffix, RangesTmpSuffix} {
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

// IsWeightName reports whether a file name is a weight file by its
// extension: what llama.cpp, vLLM, transformers and torch load. A name that
// is a download still in progress is never a weight file, whatever it ends
// in. A remote catalog source whose file name fails this test could be
// fetched but would never be seen as held, so the catalog refuses it.
func IsWeightName(name string) bool {
	return !IsPartialName(name) && HasWeightExt(name)
}

// HasWeightExt reports whether a name ends in a weight file's extension,
// whether or not it is finished.
func HasWeightExt(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".gguf", ".safetensors", ".bin", ".pt", ".pth":
		return true
	}
	return false
}

// IsPartialName reports whether a name is a download still being written:
// llmgw's own fetcher and most download tools write to ".part" (the fetcher
// keeps its resume state in ".part.ranges" beside it), huggingface_hub to
// ".incomplete", and rsync to a hidden ".NAME.XXXXXX" beside the target.
// Such a file is never weights, and a directory holding one is not
// finished: the tool that is writing it has not renamed it yet.
func IsPartialName(name string) bool {
	lower := strings.ToLower(name)
	if strings.HasSuffix(lower, PartSuffix) || strings.HasSuffix(lower, RangesSuffix) || strings.HasSuffix(lower, ".incomplete") ||
		strings.HasSuffix(lower, ".partial") || strings.Contains(lower, ".partial-") {
		return true
	}
	return isRsyncTemp(name)
}

// isRsyncTemp recognises rsync's temporary name for a weight file it is
// still receiving: "." + the final name + "." + six random characters.
func isRsyncTemp(name string) bool {
	if len(name) < 9 || name[0] != '.' || name[len(name)-7] != '.' {
		return false
	}
	for _, r := range name[len(name)-6:] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return HasWeightExt(name[1 : len(name)-7])
}

// redactedPrefix begins the query RedactQuery puts in place of a secret one.
const redactedPrefix = "REDACTED-"

// RedactQuery returns an http(s) source with its query string replaced by
// "REDACTED-" and sixteen hex digits of the query's sha256, and any other
// source as it is. A query string is where signed URLs (S3, GCS, Azure SAS)
// carry their signature; the redacted form goes where others may read it
// (open reads, the node's 0644 catalog copy, job records) and still tells
// two queries apart, and a redacted source is its own redaction.
func RedactQuery(source string) string {
	if !strings.HasPrefix(source, "http://") && !strings.HasPrefix(source, "https://") {
		return source
	}
	i := strings.IndexByte(source, '?')
	if i < 0 {
		return source
	}
	q, frag := source[i+1:], ""
	if j := strings.IndexByte(q, '#'); j >= 0 {
		q, frag = q[:j], q[j:]
	}
	if IsRedactedQuery(q) {
		return source
	}
	sum := sha256.Sum256([]byte(q))
	return source[:i] + "?" + redactedPrefix + hex.EncodeToString(sum[:])[:cacheHashLen] + frag
}

// IsRedactedQuery reports whether q is a query RedactQuery wrote.
func IsRedactedQuery(q string) bool {
	h, ok := strings.CutPrefix(q, redactedPrefix)
	if !ok || len(h) != cacheHashLen {
		return false
	}
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
