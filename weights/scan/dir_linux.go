//go:build linux && (amd64 || arm64 || ppc64le || riscv64)

package scan

import (
	"encoding/binary"
	"io/fs"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A scan makes one stat call per file, so how it makes them is most of its
// cost: the target is to be no slower than du -sb, which makes the same
// calls. This file does what du does: open each directory once, read its
// entries with getdents64 into a large buffer, and stat each one relative to
// the open directory (fstatat), so the kernel resolves one name per file
// rather than the whole path again. The names are kept NUL-terminated in one
// buffer per directory, so a stat copies nothing; os.ReadDir plus os.Lstat
// cost three allocations per file and twice the CPU in user space.
//
// The raw newfstatat call is why this file is limited to the 64-bit
// architectures whose Stat_t it matches; the others use dir_other.go.

// devIno identifies a file across paths, to follow symlinks without
// looping and to notice a mount point inside a scanned directory.
type devIno struct{ dev, ino uint64 }

// fileStat is what a scan needs to know of one file.
type fileStat struct {
	size  int64
	typ   fs.FileMode // fs.ModeDir, fs.ModeSymlink, 0 for a regular file, else fs.ModeIrregular
	id    devIno
	mtime int64 // modification time, Unix nanoseconds
}

// entry is one directory entry: its name and its type as the directory
// listing gave it (0 for a regular file, as fs.FileMode has it).
type entry struct {
	name string
	typ  fs.FileMode
	off  int // of the NUL-terminated name in the handle's names
}

// dirHandle is a directory open for stat'ing what is in it.
type dirHandle struct {
	fd    int
	id    devIno
	hasID bool
	names []byte
}

// direntBufs recycles getdents buffers: 32 KiB, as glibc's readdir
// uses, lists a directory of a thousand shards in one or two calls.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// openDir opens and lists a directory. It opens with O_DIRECTORY, so a
// FIFO that has taken a directory's place is refused instead of blocking the
// scan. On error the handle may still be non-nil with some entries: a
// listing that failed part way still names real files. The caller closes a
// non-nil handle.
func openDir(dir string) (*dirHandle, []entry, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	h := &dirHandle{fd: fd}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		h.id, h.hasID = devIno{dev: st.Dev, ino: st.Ino}, true
	}
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	var ents []entry
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return h, ents, &fs.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			break
		}
		ents = h.parse(buf[:n], ents)
	}
	// d_type is DT_UNKNOWN on some filesystems (older XFS, some FUSE and
	// network ones): ask, as readdir(3) users must.
	for i := range ents {
		if ents[i].typ == typeUnknown {
			if st, err := h.stat(&ents[i], false); err == nil {
				ents[i].typ = st.typ
			} else {
				ents[i].typ = fs.ModeIrregular
			}
		}
	}
	if afterList != nil {
		afterList(dir)
	}
	return h, ents, nil
}

// typeUnknown marks an entry whose type the listing did not give.
const typeUnknown = fs.ModeType

// parse appends the linux_dirent64 records in b to ents.
func (h *dirHandle) parse(b []byte, ents []entry) []entry {
	const nameOff = 19 // d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			break
		}
		rec := b[:reclen]
		b = b[reclen:]
		if binary.NativeEndian.Uint64(rec[0:8]) == 0 {
			continue // a deleted entry some filesystems still list
		}
		name := rec[nameOff:]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if len(name) == 0 || string(name) == "." || string(name) == ".." {
			continue
		}
		var typ fs.FileMode
		switch rec[18] {
		case unix.DT_REG:
		case unix.DT_DIR:
			typ = fs.ModeDir
		case unix.DT_LNK:
			typ = fs.ModeSymlink
		case unix.DT_UNKNOWN:
			typ = typeUnknown
		default:
			typ = fs.ModeIrregular
		}
		off := len(h.names)
		h.names = append(append(h.names, name...), 0)
		ents = append(ents, entry{name: string(name), typ: typ, off: off})
	}
	return ents
}

func (h *dirHandle) close() { unix.Close(h.fd) }

// stat stats entry e of the directory, following a final symlink when
// follow is set.
func (h *dirHandle) stat(e *entry, follow bool) (fileStat, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if follow {
		flags = 0
	}
	var st unix.Stat_t
	for {
		// The name is already NUL-terminated in h.names: no copy, and the
		// conversions stay in the argument list, as unsafe.Pointer's rules
		// for system calls require.
		_, _, errno := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(h.fd), uintptr(unsafe.Pointer(&h.names[e.off])),
			uintptr(unsafe.Pointer(&st)), uintptr(flags), 0, 0)
		switch errno {
		case 0:
		case unix.EINTR:
			continue
		default:
			return fileStat{}, &fs.PathError{Op: "stat", Path: e.name, Err: errno}
		}
		break
	}
	var typ fs.FileMode
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		typ = fs.ModeDir
	case unix.S_IFLNK:
		typ = fs.ModeSymlink
	default:
		typ = fs.ModeIrregular
	}
	return fileStat{size: st.Size, typ: typ, id: devIno{dev: st.Dev, ino: st.Ino}, mtime: st.Mtim.Nano()}, nil
}
