package api

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// isControl reports the runes that change what a terminal shows instead of
// being shown: C0 (with TAB and newline), DEL, C1 (U+0080-U+009F, which
// some terminals read as escape sequences), and the Unicode line separators
// and bidirectional overrides, which reorder or split a line on screen.
func isControl(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == '\u2028', r == '\u2029', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

// StripControl returns s without control characters, for free text a node
// sends (problems, errors, versions): the coordinator stores and serves it to
// every operator's terminal, so an ESC sequence or a newline that draws a
// fake table row is removed at the door. White space becomes one space, so
// words stay apart; invalid UTF-8 becomes U+FFFD.
func StripControl(s string) string {
	if !hasControl(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			b.WriteByte(' ')
		case isControl(r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EscapeControl returns s with every control character (and every byte
// that is not UTF-8) written as a Go escape (\x1b, \u202e), for text printed
// in a table: a path may lawfully hold any byte but '/' and NUL, so paths
// cannot be stripped at ingest, and whatever a coordinator answers must not
// move the cursor, recolour the screen or start a new table row.
func EscapeControl(s string) string {
	if !hasControl(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && isControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == '\\':
			// Escaped too, so an escape in the output always came from here.
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// hasControl reports whether s holds a control character or is not UTF-8.
func hasControl(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || isControl(r) {
			return true
		}
	}
	return false
}
