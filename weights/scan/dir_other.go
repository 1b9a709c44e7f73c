//go:build !(linux && (amd64 || arm64 || ppc64le || riscv64))

package scan

import (
	"io/fs"
	"os"
	"syscall"
)

// The portable version of dir_linux.go: os.ReadDir and a stat by full
// path. Slower, and the same answers.

type devIno struct{ dev, ino uint64 }

type fileStat struct {
	size  int64
	typ   fs.FileMode
	id    devIno
	mtime int64 // modification time, Unix nanoseconds
}

type entry struct {
	name string
	typ  fs.FileMode
}

type dirHandle struct {
	path  string
	id    devIno
	hasID bool
}

func identityOf(fi fs.FileInfo) (devIno, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return devIno{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true //nolint:unconvert // widths differ by platform
	}
	return devIno{}, false
}

func openDir(dir string) (*dirHandle, []entry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.IsDir() {
		return nil, nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
	}
	h := &dirHandle{path: dir}
	h.id, h.hasID = identityOf(fi)
	des, err := f.ReadDir(-1)
	ents := make([]entry, len(des))
	for i, d := range des {
		ents[i] = entry{name: d.Name(), typ: d.Type()}
	}
	if afterList != nil {
		afterList(dir)
	}
	return h, ents, err
}

func (h *dirHandle) close() {}

func (h *dirHandle) stat(e *entry, follow bool) (fileStat, error) {
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	fi, err := stat(h.path + "/" + e.name)
	if err != nil {
		return fileStat{}, err
	}
	id, _ := identityOf(fi)
	return fileStat{size: fi.Size(), typ: fi.Mode().Type(), id: id, mtime: fi.ModTime().UnixNano()}, nil
}
