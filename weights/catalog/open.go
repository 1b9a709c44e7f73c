package catalog

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// OpenRegular opens path for reading, as os.Open does, but leaves the file
// out of Go's network poller. os.Open offers every file it opens to the
// poller (on a hook's first open, that creates the epoll instance and its
// eventfd, and starts netpoll in the background), though a regular file
// cannot be polled: five system calls per file for nothing, and the code
// behind them paged in on every start of the hook binary, which opens
// three files (13 of its ~258 page faults, measured with perf stat).
// os.NewFile on a blocking descriptor skips the poller. Reads then block,
// which for a regular file they do anyway.
func OpenRegular(path string) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// ReadRegular reads the file at path, as os.ReadFile does, opened by
// OpenRegular.
func ReadRegular(path string) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 512
	if st, err := f.Stat(); err == nil && st.Size() > 0 && st.Size() < 1<<30 {
		size = int(st.Size()) + 1
	}
	b := make([]byte, 0, size)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// createTemp creates a new file beside path for writing, mode 0600, as
// os.CreateTemp does but left out of the poller (see OpenRegular). Its name
// is hidden and unique among live processes (the process id, then a
// counter past any left by a dead process of the same id).
func createTemp(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	prefix := dir + "." + base + ".tmp-" + strconv.Itoa(os.Getpid()) + "-"
	for i := 0; ; i++ {
		name := prefix + strconv.Itoa(i)
		fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), name), nil
		case err == syscall.EINTR:
			i--
		case err != syscall.EEXIST || i >= 10000:
			return nil, &fs.PathError{Op: "createtemp", Path: prefix + "*", Err: err}
		}
	}
}
