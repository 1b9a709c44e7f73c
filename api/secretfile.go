package api

import (
	"fmt"
	"os"
)

// CheckPrivate refuses a secret file (a token, a TLS key) that anyone but
// its owner may read: on a cluster many people log in to, a token in a
// world-readable file is everyone's token. The error names the file and
// the command that fixes it.
func CheckPrivate(what, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s %s is readable or writable by group or others (mode %04o); only its owner may read it: chmod 600 %s", what, path, perm, path)
	}
	return nil
}
