//go:build linux

package catalog

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// aclEntry is one entry of a POSIX access ACL.
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// aclXattr is acl in the kernel's system.posix_acl_access form, its
// entries sorted by tag and id as the kernel wants them.
func aclXattr(acl ...aclEntry) []byte {
	slices.SortFunc(acl, func(a, b aclEntry) int { return cmp.Or(cmp.Compare(a.tag, b.tag), cmp.Compare(a.id, b.id)) })
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint32(2))
	for _, e := range acl {
		binary.Write(&b, binary.LittleEndian, e)
	}
	return b.Bytes()
}

const noID = ^uint32(0)

// credACL is what systemd's LoadCredential leaves on a credential for a
// service user uid (src/core/exec-credential.c, write_credential: 0400,
// then read for uid by ACL): owner r, uid r, group none, mask r, other none.
func credACL(uid uint32, extra ...aclEntry) []byte {
	acl := []aclEntry{{0x01, 4, noID}, {0x02, 4, uid}, {0x04, 0, noID}}
	acl = append(acl, extra...)
	return aclXattr(append(acl, aclEntry{0x10, 4, noID}, aclEntry{0x20, 0, noID})...)
}

// TestCheckPrivateSystemdCredential: a token systemd hands a service as a
// credential is root's, mode 0400, readable by the service user through an
// ACL, and stat shows the ACL's mask in the group bits (0440). That is the
// token file the packaged coordinator unit reads (LoadCredential), and it
// must be taken; an ACL that lets anyone else read it must not.
func TestCheckPrivateSystemdCredential(t *testing.T) {
	me := uint32(os.Geteuid())
	for _, c := range []struct {
		name string
		acl  []byte
		ok   bool
	}{
		{"systemd's credential for the reader", credACL(me), true},
		{"another user too", credACL(me, aclEntry{0x02, 4, me + 1}), false},
		{"a named group", credACL(me, aclEntry{0x08, 4, 4242}), false},
		{"only another user", credACL(me + 1), false},
		{"the owning group", aclXattr(aclEntry{0x01, 4, noID}, aclEntry{0x02, 4, me}, aclEntry{0x04, 4, noID}, aclEntry{0x10, 4, noID}, aclEntry{0x20, 0, noID}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "admin.token")
			if err := os.WriteFile(p, []byte("secret\n"), 0o400); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Setxattr(p, "system.posix_acl_access", c.acl, 0); err != nil {
				if errors.Is(err, syscall.ENOTSUP) {
					t.Skipf("%s: no POSIX ACLs on this file system", p)
				}
				t.Fatal(err)
			}
			st, _ := os.Stat(p)
			if st.Mode().Perm()&0o070 == 0 {
				t.Fatalf("stat shows mode %04o after the ACL; want the mask in the group bits", st.Mode().Perm())
			}
			err := CheckPrivate("token file", p)
			if c.ok && err != nil {
				t.Errorf("CheckPrivate: %v; want it taken", err)
			}
			if !c.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+p)) {
				t.Errorf("CheckPrivate: %v; want it refused, naming the chmod", err)
			}
		})
	}
}

func TestACLGrantsOnlyMalformed(t *testing.T) {
	for _, b := range [][]byte{nil, {2, 0, 0}, {1, 0, 0, 0}, append(aclXattr(aclEntry{0x01, 4, noID}), 1)} {
		if aclGrantsOnly(b, 0) {
			t.Errorf("aclGrantsOnly(%x) = true; want a malformed ACL refused", b)
		}
	}
}
