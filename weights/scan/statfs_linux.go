package scan

import (
	"fmt"
	"syscall"
)

// Filesystem magic numbers (statfs f_type), from linux/magic.h and the
// filesystems' own sources.
const (
	magicNFS     = 0x6969
	magicLustre  = 0x0BD00BD0
	magicGPFS    = 0x47504653
	magicCeph    = 0x00C36400
	magicFUSE    = 0x65735546
	magicCIFS    = 0xFF534D42
	magicSMB2    = 0xFE534D42
	magicSMB     = 0x517B
	magicBeeGFS  = 0x19830326
	magicExt4    = 0xEF53
	magicXFS     = 0x58465342
	magicBtrfs   = 0x9123683E
	magicTmpfs   = 0x01021994
	magicOverlay = 0x794C7630
	magicZFS     = 0x2FC12FC1
	magicSquash  = 0x73717368
	magicRamfs   = 0x858458F6
	magicF2FS    = 0xF2F52010
)

// fsTypes names the filesystems a scan is likely to meet and says which
// are shared.
//
// Shared means a network filesystem: NFS, Lustre, GPFS, CephFS, BeeGFS, SMB
// and FUSE, which is how GlusterFS and object-store mounts appear. It is
// decided by statfs magic rather than by parsing the mount table, because the
// mount table says what was asked for and statfs says what the kernel has.
//
// Anything not listed as shared is local, including filesystems this table
// does not know. That is the conservative direction: a filer read as local
// costs an unnecessary copy, while local storage read as shared would have
// the cluster believe a model is on every node when it is on one. (FUSE is
// the one imprecise entry: a local NTFS disk mounted with ntfs-3g is FUSE
// too, and is reported shared.)
var fsTypes = map[uint32]struct {
	name   string
	shared bool
}{
	magicNFS:     {"nfs", true},
	magicLustre:  {"lustre", true},
	magicGPFS:    {"gpfs", true},
	magicCeph:    {"ceph", true},
	magicFUSE:    {"fuse", true},
	magicCIFS:    {"cifs", true},
	magicSMB2:    {"smb2", true},
	magicSMB:     {"smb", true},
	magicBeeGFS:  {"beegfs", true},
	magicExt4:    {"ext4", false},
	magicXFS:     {"xfs", false},
	magicBtrfs:   {"btrfs", false},
	magicTmpfs:   {"tmpfs", false},
	magicOverlay: {"overlay", false},
	magicZFS:     {"zfs", false},
	magicSquash:  {"squashfs", false},
	magicRamfs:   {"ramfs", false},
	magicF2FS:    {"f2fs", false},
}

// fsKind names a statfs magic number and says whether it is shared.
func fsKind(magic uint32) (name string, shared bool) {
	if k, ok := fsTypes[magic]; ok {
		return k.name, k.shared
	}
	return fmt.Sprintf("0x%x", magic), false
}

// statfsMagic returns the filesystem magic of the filesystem holding p. On a
// dead NFS mount this can block indefinitely: call it only where a stuck
// call is bounded (inside a directory's scan goroutine).
func statfsMagic(p string) (uint32, error) {
	var st syscall.Statfs_t
	for {
		err := syscall.Statfs(p, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return uint32(st.Type), nil //nolint:unconvert // Type is int64 on amd64, int32 elsewhere
	}
}
