package catalog

import (
	"fmt"
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
