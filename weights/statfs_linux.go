package weights

import (
	"fmt"
	"syscall"
)

// Filesystem magic numbers (statfs f_type), from linux/magic.h and the
// filesystems' own sources.
const (
	scanMagicNFS     = 0x6969
	scanMagicLustre  = 0x0BD00BD0
	scanMagicGPFS    = 0x47504653
	scanMagicCeph    = 0x00C36400
	scanMagicFUSE    = 0x65735546
	scanMagicCIFS    = 0xFF534D42
	scanMagicSMB2    = 0xFE534D42
	scanMagicSMB     = 0x517B
	scanMagicBeeGFS  = 0x19830326
	scanMagicExt4    = 0xEF53
	scanMagicXFS     = 0x58465342
	scanMagicBtrfs   = 0x9123683E
	scanMagicTmpfs   = 0x01021994
	scanMagicOverlay = 0x794C7630
	scanMagicZFS     = 0x2FC12FC1
	scanMagicSquash  = 0x73717368
	scanMagicRamfs   = 0x858458F6
	scanMagicF2FS    = 0xF2F52010
)

// scanFSTypes names the filesystems a scan is likely to meet and says which
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
var scanFSTypes = map[uint32]struct {
	name   string
	shared bool
}{
	scanMagicNFS:     {"nfs", true},
	scanMagicLustre:  {"lustre", true},
	scanMagicGPFS:    {"gpfs", true},
	scanMagicCeph:    {"ceph", true},
	scanMagicFUSE:    {"fuse", true},
	scanMagicCIFS:    {"cifs", true},
	scanMagicSMB2:    {"smb2", true},
	scanMagicSMB:     {"smb", true},
	scanMagicBeeGFS:  {"beegfs", true},
	scanMagicExt4:    {"ext4", false},
	scanMagicXFS:     {"xfs", false},
	scanMagicBtrfs:   {"btrfs", false},
	scanMagicTmpfs:   {"tmpfs", false},
	scanMagicOverlay: {"overlay", false},
	scanMagicZFS:     {"zfs", false},
	scanMagicSquash:  {"squashfs", false},
	scanMagicRamfs:   {"ramfs", false},
	scanMagicF2FS:    {"f2fs", false},
}

// scanFSKind names a statfs magic number and says whether it is shared.
func scanFSKind(magic uint32) (name string, shared bool) {
	if k, ok := scanFSTypes[magic]; ok {
		return k.name, k.shared
	}
	return fmt.Sprintf("0x%x", magic), false
}

// scanStatfs returns the filesystem magic of the filesystem holding p. On a
// dead NFS mount this can block indefinitely: call it only where a stuck
// call is bounded (inside a directory's scan goroutine).
func scanStatfs(p string) (uint32, error) {
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
