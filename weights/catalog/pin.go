package catalog

import (
	"fmt"
	"strings"
)

// WantSHA256 is the digest a fetch of m must produce: the declared one,
// else the one pinned at the first verified fetch, else "" (nothing yet
// to verify against, and the fetch that follows pins what it gets).
func (m Model) WantSHA256() string {
	if m.SHA256 != "" {
		return m.SHA256
	}
	return m.Pinned
}

// NeedsPin reports whether a verified fetch of m should be reported to the
// coordinator to be pinned: a remote source with neither a declared nor a
// pinned digest. A path is the operator's own file and a model id the
// engine's business; neither is fetched by llmgw. A Hub model is pinned
// by its commit, and each of its files by the Hub's digest.
func (m Model) NeedsPin() bool {
	return m.SHA256 == "" && m.Pinned == "" && KindOf(m.Source) == KindRemote && !m.IsHub()
}

// PinMismatch is the one message for "the origin now serves other bytes
// than the cluster pinned": the coordinator answers a conflicting pin with
// it and the Prolog fails a job with it, so that the job's owner and the
// admin read the same model, both digests and the command that accepts the
// new bytes. origin is how the origin named the pinned version when it
// served it (Model.PinnedETag: an ETag, or the hub's commit), "" when it
// named none: with it, the admin can ask the origin what changed since.
func PinMismatch(model, source, pinned, origin, got string) string {
	first := "its first verified fetch"
	if origin != "" {
		first += ", served as " + origin
	}
	return fmt.Sprintf("model %s is pinned to sha256 %s (%s), but %s now serves sha256 %s; "+
		"nodes that hold the pinned bytes keep them and no node takes the new ones; "+
		"if the new bytes are meant, an admin runs 'llmgw models repin %s'",
		model, pinned, first, source, got, model)
}

// OtherSHA256 returns the first 64-hex-digit word in msg that is not
// known, or "". A fetch that failed verification names the digest it got
// in its message, and that message may have crossed the agent's socket as
// text; this recovers the digest for PinMismatch.
func OtherSHA256(msg, known string) string {
	isHex := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	for i := 0; i+64 <= len(msg); i++ {
		if !isHex(msg[i]) || i > 0 && isHex(msg[i-1]) {
			continue
		}
		j := i
		for j < len(msg) && isHex(msg[j]) {
			j++
		}
		if w := strings.ToLower(msg[i:j]); j-i == 64 && w != strings.ToLower(known) {
			return w
		}
		i = j
	}
	return ""
}
