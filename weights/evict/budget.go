package evict

import "fmt"

// The space budget of one cache filesystem: what llmgw may use of it, the
// watermarks between which the agent evicts, and the answer to "may I
// claim N bytes at priority P". A fetch for a job claims at Job and may
// have the agent evict for it; a prefetch claims at Prefetch and never
// evicts, nor takes room above the low watermark, so what a prefetch holds
// never stands in the way of a job's fetch.

// Priority is whose claim it is.
type Priority int

const (
	// Job is a fetch a job waits for (a Prolog's, an operator's `llmgw
	// fetch`, a seed): it may evict, by Plan's rules, to fit.
	Job Priority = iota
	// Prefetch is a fetch ahead of a job: it takes only room that is free
	// below the low watermark, and evicts nothing.
	Prefetch
)

func (p Priority) String() string {
	if p == Prefetch {
		return "prefetch"
	}
	return "job"
}

// Default watermarks, in percent of the space llmgw may use (Budget.Usable):
// above DefaultHigh the agent evicts down to DefaultLow.
const (
	DefaultHigh = 90
	DefaultLow  = 80
)

// Budget is one cache filesystem's space, as eviction sees it.
type Budget struct {
	// Cached is what llmgw's fetched entries occupy (Plan's entries, in
	// bytes on disk).
	Cached int64
	// Free is what an unprivileged writer may still use on the filesystem
	// (f_bavail).
	Free int64
	// Reserve is free space llmgw leaves to others (cache_reserve).
	Reserve int64
	// Claimed is what fetches in flight will still write.
	Claimed int64
	// High and Low are the watermarks in percent (0: the defaults).
	High, Low int
}

func (b Budget) high() int64 { return b.Usable() * int64(pct(b.High, DefaultHigh)) / 100 }
func (b Budget) low() int64  { return b.Usable() * int64(pct(b.Low, DefaultLow)) / 100 }

func pct(v, def int) int {
	if v <= 0 || v > 100 {
		return def
	}
	return v
}

// Usable is the space llmgw may use: what it holds plus what is free,
// less the reserve. Another tenant of the filesystem that grows shrinks
// it, and eviction then gives way.
func (b Budget) Usable() int64 { return max(0, b.Cached+b.Free-b.Reserve) }

// Committed is what llmgw holds and will hold once the fetches in flight
// end.
func (b Budget) Committed() int64 { return b.Cached + b.Claimed }

// Pressure is how many bytes the agent evicts now: down to the low
// watermark once what is held and claimed is above the high one; else 0.
func (b Budget) Pressure() int64 {
	if b.Committed() <= b.high() {
		return 0
	}
	return b.Committed() - b.low()
}

// Room is how many bytes a claim at p may take without evicting anything.
func (b Budget) Room(p Priority) int64 {
	if p == Prefetch {
		return max(0, b.low()-b.Committed())
	}
	return max(0, b.Free-b.Reserve-b.Claimed)
}

// Claim answers "may I claim n bytes at priority p": with ok, it fits
// after evicting evict bytes (0: it fits as it is); without, it cannot
// (a prefetch that does not fit below the low watermark, or a claim
// larger than all llmgw may use), and why says so.
func (b Budget) Claim(n int64, p Priority) (evict int64, ok bool, why string) {
	room := b.Room(p)
	if n <= room {
		return 0, true, ""
	}
	if p == Prefetch {
		return 0, false, fmt.Sprintf("a prefetch takes only room below the low watermark (cache_low, %d%% of %d bytes llmgw may use): %d bytes left, %d asked", pct(b.Low, DefaultLow), b.Usable(), room, n)
	}
	if n > b.Usable()-b.Claimed {
		return 0, false, fmt.Sprintf("%d bytes are more than llmgw may use on this filesystem (%d bytes, less %d claimed by fetches in flight)", n, b.Usable(), b.Claimed)
	}
	// Only the shortfall: the agent's own pass brings the cache down to
	// the low watermark when it is above the high one.
	return n - room, true, ""
}
