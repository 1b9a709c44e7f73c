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
// weights/catalog/set.go), and asks for each file in turn: the Prolog
// does, through the agent or in its own process (prolog/full/full.go).
func (f *Fetcher) EnsureIn(ctx context.Context, set, source string, want Want) (string, error) {
	if !catalog.IsSetName(set) {
		return "", &Error{Source: source, Op: "parse", Err: fmt.Errorf("%q is not a set directory's name (catalog.SetName)", set)}
	}
	if catalog.KindOf(source) != catalog.KindRemote {
		return "", &Error{Source: source, Op: "parse", Err: errors.New("a file of a model of several files must be an hf: or http(s) source")}
	}
	return f.ensureRemote(ctx, source, set, want)
}
