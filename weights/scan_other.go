//go:build !(linux && (amd64 || arm64 || ppc64le || riscv64))

package weights

import (
	"io/fs"
	"os"
	"syscall"
)

// The portable version of scan_linux.go: os.ReadDir and a stat by full
// path. Slower, and the same answers.

type scanDevIno struct{ dev, ino uint64 }

type scanStat struct {
	size int64
	typ  fs.FileMode
	id   scanDevIno
}

type scanEnt struct {
	name string
	typ  fs.FileMode
}

type scanDirHandle struct {
	path  string
	id    scanDevIno
	hasID bool
}

func scanIdentityOf(fi fs.FileInfo) (scanDevIno, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return scanDevIno{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true //nolint:unconvert // widths differ by platform
	}
	return scanDevIno{}, false
}

func scanOpenDir(dir string) (*scanDirHandle, []scanEnt, error) {
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
	h := &scanDirHandle{path: dir}
	h.id, h.hasID = scanIdentityOf(fi)
	des, err := f.ReadDir(-1)
	ents := make([]scanEnt, len(des))
	for i, d := range des {
		ents[i] = scanEnt{name: d.Name(), typ: d.Type()}
	}
	if scanAfterList != nil {
		scanAfterList(dir)
	}
	return h, ents, err
}

func (h *scanDirHandle) close() {}

func (h *scanDirHandle) stat(e *scanEnt, follow bool) (scanStat, error) {
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	fi, err := stat(h.path + "/" + e.name)
	if err != nil {
		return scanStat{}, err
	}
	id, _ := scanIdentityOf(fi)
	return scanStat{size: fi.Size(), typ: fi.Mode().Type(), id: id}, nil
}
