package fetch

import "context"

// A fetch made ahead of any job (a prefetch, issue 28) claims room in the
// node's record like every other writer of the cache, with two
// differences: it never has MakeRoom evict for it, and the room it may
// take is the cache's budget at prefetch priority (Fetcher.PrefetchRoom,
// the agent's: what is left below cache_low), not what is free. So a
// prefetch fills the cache at most to where an eviction pass would bring
// it down to, and what it brought never costs a job's fetch anything but
// an eviction of files no job has used.
//
// Which fetch is which travels in the context, because the Fetcher is
// shared by every caller on the node and a fetch's claim is made deep
// inside it (a file's download, a set's or a Hub model's claim); the
// shared fetch keeps its first caller's values (context.WithoutCancel),
// and its claim is made before its first byte, so a job that joins a
// prefetch's fetch later finds its room already claimed.

type aheadKey struct{}

// Ahead marks ctx as a fetch no job waits for: see the comment above.
func Ahead(ctx context.Context) context.Context {
	return context.WithValue(ctx, aheadKey{}, true)
}

// IsAhead says whether ctx was marked by Ahead.
func IsAhead(ctx context.Context) bool {
	v, _ := ctx.Value(aheadKey{}).(bool)
	return v
}
