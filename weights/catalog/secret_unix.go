//go:build unix

package catalog

import (
	"encoding/binary"
	"os"
	"syscall"
)

// fileOwner is the uid owning the file st describes.
func fileOwner(st os.FileInfo) (int, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(s.Uid), true
}

// aclOnlyFor reports whether the file at path has a POSIX access ACL that
// lets nobody but uid (and the owner) read or write it.
func aclOnlyFor(path string, uid int) bool {
	buf := make([]byte, 1024)
	n, err := syscall.Getxattr(path, "system.posix_acl_access", buf)
	if err != nil || n > len(buf) {
		return false
	}
	return aclGrantsOnly(buf[:n], uid)
}

// aclGrantsOnly reports whether acl, an access ACL in the kernel's xattr form
// (system.posix_acl_access: a version, then tag, permission and id
// entries), gives read or write to nobody but the owner and uid: no bits
// for the owning group or others, no named group, and no named user but
// uid (each as the mask leaves them).
func aclGrantsOnly(acl []byte, uid int) bool {
	const (
		userObj, user, groupObj, group, mask, other = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
		rw                                          = 0o6
	)
	if len(acl) < 4 || binary.LittleEndian.Uint32(acl) != 2 || (len(acl)-4)%8 != 0 {
		return false
	}
	m := uint16(0o7)
	for e := acl[4:]; len(e) > 0; e = e[8:] {
		if binary.LittleEndian.Uint16(e) == mask {
			m = binary.LittleEndian.Uint16(e[2:])
		}
	}
	for e := acl[4:]; len(e) > 0; e = e[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])
		switch tag {
		case userObj, mask:
		case user:
			if perm&m&rw != 0 && int64(id) != int64(uid) {
				return false
			}
		case groupObj, group:
			if perm&m&rw != 0 {
				return false
			}
		case other:
			if perm&rw != 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
