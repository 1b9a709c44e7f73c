package catalog

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// MaxPath is the longest path llmgw accepts anywhere: Linux's PATH_MAX. A
// longer one cannot be opened, so refusing it loses nothing, and it bounds
// what one report or one config line can make a process hold.
const MaxPath = 4096

// CheckAbsPath says why p cannot be a path llmgw keeps or passes on (a
// directory in the agent's configuration, a path an agent reports), or nil;
// what names the path in the error. Such a path must be absolute because
// the agent runs from / and the coordinator compares the paths of many
// nodes: a relative one would mean something different to each reader. It
// must be UTF-8 without NUL because it travels as JSON, which would mangle
// anything else into a path that names no file.
func CheckAbsPath(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is empty", what)
	case len(p) > MaxPath:
		return fmt.Errorf("%s is %d bytes; the limit is %d", what, len(p), MaxPath)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%s %q contains NUL", what, p)
	case !utf8.ValidString(p):
		return fmt.Errorf("%s %q is not UTF-8", what, p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%s %q is relative, not absolute; give a path that starts with / (the agent runs from /)", what, p)
	}
	return nil
}

// CleanPath is filepath.Clean(p), without its cost when p is already an
// absolute clean path, as nearly every path an agent reports is.
// filepath.Clean walks p byte by byte through a copy-on-write buffer; the
// coordinator cleans each weight of a report twice (once to find
// duplicates, once to store one spelling of each), and at 50 weights a
// report that was 6% of a node's first report's CPU
// (BenchmarkCoordinatorMunge). Here the check jumps from slash to slash.
func CleanPath(p string) string {
	if isCleanAbs(p) {
		return p
	}
	return filepath.Clean(p)
}

// isCleanAbs says whether p is absolute and filepath.Clean leaves it as it
// is: "/", or "/" followed by elements none of which is empty (a doubled or
// trailing slash), "." or "..". One pass over the bytes: the elements of a
// path are short, and a search per element cost more than the pass.
func isCleanAbs(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	start := 1 // where the current element starts
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch i - start {
		case 0:
			return false
		case 1:
			if p[start] == '.' {
				return false
			}
		case 2:
			if p[start] == '.' && p[start+1] == '.' {
				return false
			}
		}
		start = i + 1
	}
	return true
}
