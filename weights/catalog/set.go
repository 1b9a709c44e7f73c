package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// A model may be made of several remote files that an engine loads
// together: the parts of a split GGUF (llama.cpp opens the first and finds
// the others beside it by name), or a safetensors checkpoint with its
// config and tokenizer files (transformers and vLLM open the directory).
// Each part fetched as a model of its own would land under its own cache
// name, with its own hash prefix, so no engine could find the siblings and
// no scan would see the whole. Such a model is a set: Model.Files lists its
// files, and they land together in one directory of the cache, the set
// directory, each under its own file name, so the directory is an ordinary
// model directory to the scanner and to the engine.
//
//   - The set directory's name is SetName: sixteen hex digits of the sha256
//     of the set's sources (redacted, in order), a dash, the first file's
//     name without its extension and part number, and ".set". It is a cache
//     name (IsCacheName), so every rule that keeps or collects a cache entry
//     by name applies to it unchanged, and the ".set" tells it apart from a
//     single fetched file by name alone (IsSetName).
//   - Each file is pinned on its own: File carries its declared sha256, its
//     size and its pin, and every file is fetched and verified by itself,
//     resumable by itself, through the one fetcher.
//   - Before the first file is fetched, the set's manifest (SetManifest)
//     is written into the directory: the files the set needs. The scanner
//     counts the directory held only when every file the manifest names is
//     there whole, so a fetch killed between two files is not held, even
//     where the file names carry no "-of-N" to tell; and gc collects a
//     directory only when the manifest proves llmgw made it.
//   - LLMGW_MODEL_PATH is SetPath: for a set whose first file is a GGUF,
//     that file (llama.cpp's -m wants the first part of a split model and
//     loads the rest from its directory); for any other set, the directory
//     (what transformers and vLLM are given).

// File is one file of a model made of several (Model.Files).
type File struct {
	// Source is an hf: or http(s) source: only remote files make a set.
	Source string `json:"source"`
	Size   int64  `json:"size_bytes,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Pinned and PinnedETag are this file's pin, as Model's are a single
	// source's: the first verified fetch of a file declared without SHA256.
	Pinned     string `json:"pinned_sha256,omitempty"`
	PinnedETag string `json:"pinned_etag,omitempty"`
}

// WantSHA256 is the digest a fetch of f must produce: declared, else
// pinned, else "".
func (f File) WantSHA256() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.Pinned
}

// NeedsPin reports whether a verified fetch of f is to be pinned.
func (f File) NeedsPin() bool { return f.SHA256 == "" && f.Pinned == "" }

// IsSet reports whether m is made of several files.
func (m Model) IsSet() bool { return len(m.Files) > 0 }

// MaxSetFiles bounds the files of one set: the largest published sharded
// checkpoints have a few hundred shards, and the whole entry must fit in
// the coordinator's bound on a request body.
const MaxSetFiles = 256

// SetSuffix ends every set directory's name.
const SetSuffix = ".set"

// SetManifest is the name of a set directory's manifest. A hidden name
// that is no weight file's: the scanner and engines pass over it.
const SetManifest = ".llmgw-set.json"

// CheckSet says why m's files cannot be a set, or nil; m.Files must be
// non-empty. Every file must be remote, and the files' names (FileName)
// distinct, none hidden or a download's temporary name, and one of them
// at least a weight file, or the directory would never count as held.
func CheckSet(m Model) error {
	switch {
	case len(m.Files) < 2:
		return fmt.Errorf("a model of several files needs at least two; give a single source as the model's source")
	case len(m.Files) > MaxSetFiles:
		return fmt.Errorf("%d files; the limit is %d", len(m.Files), MaxSetFiles)
	case m.Source != "" && m.Source != m.Files[0].Source:
		return fmt.Errorf("source %q is not the first of its files (%q); a model of several files is named by its first", m.Source, m.Files[0].Source)
	case m.SHA256 != "":
		return errors.New("a model of several files takes a sha256 per file, not one for the model")
	}
	names := map[string]string{}
	weights := false
	for _, f := range m.Files {
		if KindOf(f.Source) != KindRemote {
			return fmt.Errorf("file %q is not an hf: or http(s) source; only fetched files make a model of several files (a path names a directory of them already)", f.Source)
		}
		name := FileName(f.Source)
		switch {
		case strings.HasPrefix(name, "."):
			return fmt.Errorf("file %q would be named %q, a hidden name the scanner passes over", f.Source, name)
		case IsPartialName(name):
			return fmt.Errorf("file %q would be named %q, the name of a download still being written", f.Source, name)
		case f.Size < 0:
			return fmt.Errorf("file %q: size is negative", f.Source)
		case f.SHA256 != "" && !ValidSHA256(f.SHA256):
			return fmt.Errorf("file %q: sha256 must be 64 hex digits", f.Source)
		}
		if prev, dup := names[name]; dup {
			return fmt.Errorf("files %q and %q would both be named %q in the model's directory", prev, f.Source, name)
		}
		names[name] = f.Source
		weights = weights || IsWeightName(name)
	}
	if !weights {
		return errors.New("no file is a weight file (.gguf, .safetensors, .bin, .pt or .pth), so the fetched set would never count as held")
	}
	return nil
}

// FileName is the name a remote source's file has in a set directory: the
// source's own file name, made safe to put in a directory.
func FileName(source string) string { return sourceBase(source) }

// SetName is the name of m's set directory in the cache; see the comment
// at the top of this file. The hash is of the redacted sources, as
// CacheName's, so the world-readable catalog copy names the same directory.
func SetName(m Model) string {
	h := sha256.New()
	for _, f := range m.Files {
		h.Write([]byte(RedactQuery(f.Source)))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:cacheHashLen] + "-" + setStem(m.Files[0].Source) + SetSuffix
}

// setStem is the first file's name without its extension and part
// number: "qwen-7b" for qwen-7b-00001-of-00003.gguf.
func setStem(source string) string {
	name := FileName(source)
	stem := strings.TrimSuffix(name, path.Ext(name))
	if i := strings.LastIndex(stem, "-of-"); i >= 6 && stem[i-6] == '-' && digits(stem[i-5:i]) && digits(stem[i+4:]) {
		stem = stem[:i-6]
	}
	if stem == "" || stem == "." || stem == ".." {
		stem = "set"
	}
	return stem
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// IsSetName reports whether a name has the shape SetName gives.
func IsSetName(name string) bool {
	return IsCacheName(name) && strings.HasSuffix(name, SetSuffix) && len(name) > cacheHashLen+1+len(SetSuffix)
}

// SetDir is m's set directory under cacheDir.
func SetDir(cacheDir string, m Model) string { return filepath.Join(cacheDir, SetName(m)) }

// SetFilePath is where the file of source lands in the set directory dir.
func SetFilePath(dir, source string) string { return filepath.Join(dir, FileName(source)) }

// SetPath is what a job is given as LLMGW_MODEL_PATH for the set m: its
// first file when that is a GGUF (llama.cpp opens a split model by its
// first part and finds the others beside it; a directory it cannot open),
// else the directory (what transformers and vLLM load a checkpoint from).
func SetPath(cacheDir string, m Model) string {
	dir := SetDir(cacheDir, m)
	if first := FileName(m.Files[0].Source); strings.EqualFold(path.Ext(first), ".gguf") {
		return filepath.Join(dir, first)
	}
	return dir
}

// Manifest is a set directory's SetManifest: what the set needs. Sources
// are redacted (RedactQuery): the directory is readable by the jobs.
type Manifest struct {
	Files []ManifestFile `json:"files"`
}

// ManifestFile is one file a set needs; Size 0 is unknown.
type ManifestFile struct {
	Source string `json:"source"`
	Name   string `json:"name"`
	Size   int64  `json:"size_bytes,omitempty"`
}

// ManifestOf is the manifest of the set m.
func ManifestOf(m Model) Manifest {
	man := Manifest{Files: make([]ManifestFile, len(m.Files))}
	for i, f := range m.Files {
		man.Files[i] = ManifestFile{Source: RedactQuery(f.Source), Name: FileName(f.Source), Size: f.Size}
	}
	return man
}

// Name is the set directory name the manifest's sources give: a directory
// whose manifest does not name it was not made by llmgw for that set.
func (man Manifest) Name() string {
	m := Model{Files: make([]File, len(man.Files))}
	for i, f := range man.Files {
		m.Files[i].Source = f.Source
	}
	if len(m.Files) == 0 {
		return ""
	}
	return SetName(m)
}

// WriteManifest writes the set m's manifest into its directory under
// cacheDir, creating the directory; an identical manifest is left alone,
// so that a set already held is not touched.
func WriteManifest(cacheDir string, m Model) error {
	b, err := json.MarshalIndent(ManifestOf(m), "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	p := filepath.Join(SetDir(cacheDir, m), SetManifest)
	if old, err := ReadRegular(p); err == nil && string(old) == string(b) {
		return nil
	}
	return WriteAtomic(p, b, 0o644)
}

// ReadManifest reads the manifest of the set directory dir.
func ReadManifest(dir string) (Manifest, error) {
	p := filepath.Join(dir, SetManifest)
	b, err := ReadRegular(p)
	if err != nil {
		return Manifest{}, err
	}
	man, err := ParseManifest(b)
	if err != nil {
		return man, fmt.Errorf("set manifest %s: %w", p, err)
	}
	return man, nil
}

// ParseManifest reads a set manifest's bytes. Every file name must be a
// plain name: the scanner stats them and gc trusts them to stay inside.
func ParseManifest(b []byte) (Manifest, error) {
	var man Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return man, err
	}
	for _, f := range man.Files {
		if f.Name == "" || f.Name != path.Base(f.Name) || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00") {
			return man, fmt.Errorf("file name %q is not a plain name", f.Name)
		}
	}
	return man, nil
}

// MapSources returns m with f applied to its source and to each of its
// files' sources: how a catalog entry is redacted for a reader who may not
// see a signed URL's signature.
func (m Model) MapSources(f func(string) string) Model {
	m.Source = f(m.Source)
	if m.Files != nil {
		files := make([]File, len(m.Files))
		for i, fl := range m.Files {
			fl.Source = f(fl.Source)
			files[i] = fl
		}
		m.Files = files
	}
	return m
}
