package fetch

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmgw/llmgw/weights/catalog"
)

// EnsureIn makes one file of a model of several files present in the
// set directory named set (catalog.SetName) under the cache, under the
// source's own file name (catalog.FileName), and returns its path. It is
// Ensure in every other way: one fetch per file per node, resumable,
// verified against want before it gets its name. The caller writes the
// set's manifest (catalog.WriteManifest) before the first file, so that a
// set fetched only in part is never counted as held (see
// weights/catalog/set.go); EnsureSet does both.
func (f *Fetcher) EnsureIn(ctx context.Context, set, source string, want Want) (string, error) {
	if !catalog.IsSetName(set) {
		return "", &Error{Source: source, Op: "parse", Err: fmt.Errorf("%q is not a set directory's name (catalog.SetName)", set)}
	}
	if catalog.KindOf(source) != catalog.KindRemote {
		return "", &Error{Source: source, Op: "parse", Err: errors.New("a file of a model of several files must be an hf: or http(s) source")}
	}
	return f.ensureRemote(ctx, source, set, want)
}

// EnsureSet makes every file of the set m present in its set directory,
// file by file, and returns the path a job is given (catalog.SetPath).
// Each file is verified against its own entry (declared or pinned sha256,
// size); a failure is the *Error of that file's source, so it names it.
func (f *Fetcher) EnsureSet(ctx context.Context, m catalog.Model) (string, error) {
	if err := catalog.CheckSet(m); err != nil {
		return "", &Error{Source: m.Source, Op: "parse", Err: fmt.Errorf("model %s: %w", m.Name, err)}
	}
	if f.CacheDir == "" {
		return "", &Error{Source: m.Source, Op: "parse", Err: errors.New("no cache directory configured, so a remote source cannot be fetched; set --cache-dir")}
	}
	if err := catalog.WriteManifest(f.CacheDir, m); err != nil {
		return "", &Error{Source: m.Source, Op: "mkdir", Err: fmt.Errorf("set directory of model %s: %w", m.Name, err)}
	}
	set := catalog.SetName(m)
	for _, file := range m.Files {
		if _, err := f.EnsureIn(ctx, set, file.Source, Want{SHA256: file.WantSHA256(), Size: file.Size}); err != nil {
			return "", err
		}
	}
	return catalog.SetPath(f.CacheDir, m), nil
}
