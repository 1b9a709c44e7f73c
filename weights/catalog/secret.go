package catalog

import (
	"fmt"
	"os"
)

// CheckPrivate refuses a secret file (a token, a TLS key) that anyone but
// the reader may read or change. Its mode must give group and others
// nothing: on a cluster many people log in to, a token in a world-readable
// file is everyone's token. And it must be owned by root or by the user
// reading it: the owner of a file can read it and write it whatever its
// mode, so a 0600 token owned by an ordinary user is that user's to read
// and to swap for one of their choosing. The error names the file, what is
// wrong with it, and the command that fixes it.
//
// It lives here, in the standard-library leaf, because the api (agent and
// coordinator tokens, TLS keys) and the fetcher (the hub token) both read
// secrets, and the fetcher may import nothing else of llmgw.
func CheckPrivate(what, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// A POSIX ACL shows its mask in the group bits: systemd's
	// LoadCredential gives a service user a root-owned 0400 copy plus an
	// ACL entry for that user (on the tmpfs it uses since v256), and stat
	// then says 0440 although no group can read it. Such a file is private
	// when the ACL grants nobody but the reader.
	if perm := st.Mode().Perm(); perm&0o077 != 0 && !(perm&0o007 == 0 && aclOnlyFor(path, os.Geteuid())) {
		return fmt.Errorf("%s %s is readable or writable by group or others (mode %04o); only its owner may read it: chmod 600 %s", what, path, perm, path)
	}
	if uid, ok := fileOwner(st); ok {
		me := os.Geteuid()
		if uid != 0 && uid != me {
			fix := fmt.Sprintf("chown %d %s", me, path)
			if me == 0 {
				fix = "chown root:root " + path
			}
			return fmt.Errorf("%s %s is owned by uid %d, not by root or by the user reading it (uid %d); its owner can read it and replace it: %s", what, path, uid, me, fix)
		}
	}
	return nil
}
