package fetch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A Hugging Face cache is often written by more than llmgw: a site's
// shared cache on a filer is commonly writable by every user, so that
// everyone's downloads land in it, and any of them may have planted a link
// in it: blobs/ leading to /etc, refs/main to a file of root's, a
// temporary name a copy is about to open. llmgw writes there as root. So
// every name it makes in the cache is made in a directory it holds open,
// by the *at system calls (openat with O_EXCL|O_NOFOLLOW, symlinkat,
// renameat), never by a path walked again; the directories are opened
// under the cache as an os.Root (no path leaves it) and refused when one
// of them is a link; and the bytes themselves are fetched in the llmgw
// cache, which only root writes, then moved in by a rename (or a copy to
// a fresh name when the two are on different filesystems). What a link
// planted in the cache can still do is what it could do to any reader of
// the cache: lead a job to other bytes, never root's writes elsewhere.

// hubRepo is one repository's directory in a Hugging Face cache.
type hubRepo struct {
	root *os.Root // the Hugging Face cache
	rel  string   // the repository's folder in it: models--ORG--NAME
}

// dir opens the directory rel of the repository, making what is missing,
// and refuses a link or a file on the way: a directory llmgw writes in is
// one it found or made, not one a link leads to.
func (r *hubRepo) dir(rel string) (*os.File, error) {
	p := ""
	for _, part := range strings.Split(path.Join(r.rel, rel), "/") {
		p = path.Join(p, part)
		st, err := r.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err := r.root.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, err
			}
			st, err = r.root.Lstat(p)
		}
		switch {
		case err != nil:
			return nil, err
		case st.Mode()&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symbolic link; llmgw writes only into directories it finds or makes in the Hugging Face cache, never through a link: remove it", filepath.Join(r.root.Name(), p))
		case !st.IsDir():
			return nil, fmt.Errorf("%s is not a directory; remove it", filepath.Join(r.root.Name(), p))
		}
	}
	d, err := r.root.Open(p)
	if err != nil {
		return nil, err
	}
	if st, err := d.Stat(); err != nil || !st.IsDir() {
		d.Close()
		return nil, fmt.Errorf("%s is not a directory", filepath.Join(r.root.Name(), p))
	}
	return d, nil
}

// statAt is fstatat of name in the directory d; follow follows a link.
func statAt(d *os.File, name string, follow bool) (unix.Stat_t, error) {
	var st unix.Stat_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if follow {
		flags = 0
	}
	err := unix.Fstatat(int(d.Fd()), name, &st, flags)
	return st, err
}

// regularAt reports whether name in d (through a link when follow) is a
// regular file of size bytes.
func regularAt(d *os.File, name string, size int64, follow bool) bool {
	st, err := statAt(d, name, follow)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == size
}

// tmpName is a fresh name beside name in its directory: random, so that
// nobody can plant a link under it beforehand, and created with O_EXCL
// all the same.
func tmpName(name string) string {
	var b [8]byte
	rand.Read(b[:])
	return "." + name + ".llmgw-" + hex.EncodeToString(b[:]) + ".tmp"
}

// linkAt makes name in d a symbolic link to target, replacing what is
// there only by a rename, so that a reader sees the old entry or the new
// one. A link already holding target is left as it is.
func linkAt(d *os.File, name, target string) error {
	fd := int(d.Fd())
	buf := make([]byte, len(target)+1)
	if n, err := unix.Readlinkat(fd, name, buf); err == nil && string(buf[:n]) == target {
		return nil
	}
	if st, err := statAt(d, name, false); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%s is a directory where the file's link belongs; remove it", path.Join(d.Name(), name))
	}
	tmp := tmpName(name)
	if err := unix.Symlinkat(target, fd, tmp); err != nil {
		return &os.PathError{Op: "symlink", Path: path.Join(d.Name(), tmp), Err: err}
	}
	if err := unix.Renameat(fd, tmp, fd, name); err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return &os.PathError{Op: "rename", Path: path.Join(d.Name(), name), Err: err}
	}
	return nil
}

// writeAt makes name in d hold data, durably, by a rename of a fresh file.
func writeAt(d *os.File, name string, data []byte) error {
	return replaceAt(d, name, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// replaceAt writes a fresh file in d with fill, syncs it and renames it to
// name, then syncs d.
func replaceAt(d *os.File, name string, fill func(io.Writer) error) error {
	fd := int(d.Fd())
	tmp := tmpName(name)
	nfd, err := unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: path.Join(d.Name(), tmp), Err: err}
	}
	out := os.NewFile(uintptr(nfd), path.Join(d.Name(), tmp))
	err = fill(out)
	if err == nil {
		// Whatever the umask: every job's user reads the cache.
		err = out.Chmod(0o644)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if rerr := unix.Renameat(fd, tmp, fd, name); rerr != nil {
			err = &os.PathError{Op: "rename", Path: path.Join(d.Name(), name), Err: rerr}
		}
	}
	if err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return err
	}
	return d.Sync()
}

// publishAt moves the verified file staged (in the llmgw cache) to name in
// d: by a rename when the two are on one filesystem, else by a copy to a
// fresh name there and a rename. Another node that published the same
// blob into a shared cache meanwhile published the same bytes.
func publishAt(staged string, d *os.File, name string) error {
	fd := int(d.Fd())
	err := unix.Renameat(unix.AT_FDCWD, staged, fd, name)
	if err == nil {
		return d.Sync()
	}
	if !errors.Is(err, unix.EXDEV) {
		return &os.PathError{Op: "rename", Path: path.Join(d.Name(), name), Err: err}
	}
	in, err := os.Open(staged)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := replaceAt(d, name, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}); err != nil {
		return err
	}
	os.Remove(staged)
	return nil
}
