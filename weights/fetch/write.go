package fetch

import (
	"io"
	"os"
)

// Positioned writes: a response body written at its offset in the .part,
// in large writes, with the kernel asked to start writing them out early.

// writeError is a failure to write the .part: never retried, since the disk
// will not get better by asking the origin again.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// copyAt writes the body to fh from off until its end, or until limit bytes
// when limit >= 0, calling wrote (if not nil) with the end of each write, in
// large writes (a pwrite per network read would be tens of
// thousands of syscalls a second). It returns the bytes written; a body that
// ends before limit is io.ErrUnexpectedEOF.
//
// An error from wrote stops the copy as a failed write.
func (d *download) copyAt(fh *os.File, b *body, off, limit int64, wrote func(end int64) error) (int64, error) {
	buf := make([]byte, copyBuf)
	var written int64
	// Progress counts bytes as they arrive, not as they are written out a
	// buffer at a time: a slow connection still shows that it moves.
	rd := readCounter{b, &d.done}
	for {
		want := int64(len(buf))
		if limit >= 0 {
			want = min(want, limit-written)
			if want == 0 {
				return written, nil
			}
		}
		n, rerr := fill(rd, buf[:want])
		if n > 0 {
			if _, err := fh.WriteAt(buf[:n], off+written); err != nil {
				return written, &writeError{err}
			}
			written += int64(n)
			if wrote != nil {
				if err := wrote(off + written); err != nil {
					return written, &writeError{err}
				}
			}
		}
		if rerr == io.EOF {
			if limit >= 0 && written < limit {
				return written, io.ErrUnexpectedEOF
			}
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

// copyBuf is the size of one write: large enough that a pwrite per network
// read (tens of thousands of syscalls a second) is avoided, small enough
// that the bytes a killed fetch had received but not yet written are few.
const copyBuf = 256 << 10

// readCounter adds what it reads to n.
type readCounter struct {
	r io.Reader
	n interface{ Add(int64) int64 }
}

func (c readCounter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// writeBehindStep is how many bytes a stream writes before asking the kernel
// to start writing them out.
const writeBehindStep = 16 << 20

// writeBehind starts the disk writing a stream's bytes while later ones are
// still arriving. The file is fsynced before its rename; without this the
// kernel would hold the whole file in the page cache until then (a gigabyte
// is under the dirty thresholds) and the fsync would start the disk only
// after the network had finished, one after the other instead of together.
type writeBehind struct {
	fd   int
	from int64
}

func (w *writeBehind) wrote(end int64) {
	if end-w.from < writeBehindStep {
		return
	}
	startWriteOut(w.fd, w.from, end-w.from)
	w.from = end
}

// fill reads into buf until it is full or the reader fails. Unlike
// io.ReadFull it returns io.EOF itself, so a clean end stays apart from the
// io.ErrUnexpectedEOF Go's client gives for a body cut short of its length.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
