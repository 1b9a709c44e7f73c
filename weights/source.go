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

import "github.com/llmgw/llmgw/weights/catalog"

// The name rules live in the standard-library-only leaf weights/catalog, so
// the hooks can link them without the fetcher; these names keep the callers
// of this package compiling until they call catalog directly.
type Kind = catalog.Kind

const (
	KindInvalid = catalog.KindInvalid
	KindPath    = catalog.KindPath
	KindRemote  = catalog.KindRemote
	KindModelID = catalog.KindModelID
)

func KindOf(source string) Kind                   { return catalog.KindOf(source) }
func CachePathFor(cacheDir, source string) string { return catalog.CachePathFor(cacheDir, source) }
func IsCacheName(name string) bool                { return catalog.IsCacheName(name) }
