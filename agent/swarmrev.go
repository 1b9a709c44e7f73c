package agent

// A revision of several files through the swarm (issue 25): a Hub model's
// files at its commit, or a set's, laid end to end in their catalog order
// as the swarm's bytes (weights/catalog/revision.go). Everything the swarm
// does with chunks (leases, digests, peers, live reads, the sidecar) is the
// one-file code unchanged; a revision only says where each chunk's bytes
// land, where a chunk that spans two files lands in both, and seals each
// file as soon as its last chunk is in: verified against its own digest
// (sha256, or the git blob id of a small Hub file), synced, tagged, renamed
// from its .part to its name, exactly as the Fetcher ends a download. The
// pipeline stays full across files: one swarm, one lease, no restart per
// file, and the origin is asked for the next file before the last one ends
// (swarmrevorigin.go).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// revision is the bytes of a revision's swarm fetch, in its files. It is
// the swarm's swarmFile (s.fh) and what its chunk server reads (held.rev).
type revision struct {
	files []*revFile
	size  int64
	s     *swarm
	// ctx is the run's, for the seals done as chunks land; fail ends the
	// run with the reason (a file whose every chunk matched its digest and
	// whose whole does not).
	ctx  context.Context
	fail func(error)
	// hmu serialises the hashing and sealing pass (hashAhead).
	hmu sync.Mutex
	// rmu guards readers, the chunk server's answers reading through the
	// fetch's descriptors (open), and over: the fetch has ended, and its
	// descriptors are closed (ending, run by retire) once the last of
	// those answers is done. A read begun just before the revision was
	// complete must not find them closed under it: cut short, it made the
	// reader take its holder for dead (fanout.sh: a lease passed at every
	// holder's end, and the heir read a chunk from the origin again).
	rmu     sync.Mutex
	readers int
	over    bool
	ending  func()
}

// revFile is one file of a revision on this node.
type revFile struct {
	name      string
	off, size int64
	want      fetch.Want
	// final is where the file gets its name when verified (a Hub blob's
	// name in the staging directory, the set's file), its .part beside it;
	// publish, when set, moves it on from there (a Hub blob into the
	// Hugging Face cache); serve is where it is read from once the
	// revision is complete.
	final   string
	publish func() error
	serve   string
	// fh is the file's .part, open and flocked (fetch.LockFile), or the
	// verified file this node held already; the same inode after its
	// rename, so reads through it never change under a reader.
	fh *os.File
	// done says the file is verified and named: held already, or sealed.
	done atomic.Bool
	// hashed is how much of the file, from its start, the hashing pass
	// has read, with h its running sha256 (nil for a git blob file, read
	// again when sealed, or after a read error).
	hashed int64
	h      hash.Hash
	// id is the served file's identity once the revision is complete: a
	// file removed or replaced since is not served under the revision.
	id fileID
	// origin is where the lease holder reads it (swarmrevorigin.go).
	origin *fetch.Origin
	// alias, when set, is the revision's first file of the same blob (two
	// paths of a repository with the same bytes): this one's bytes land
	// in that one's .part, which is verified and named once, for both.
	alias *revFile
}

// isDone says whether f is verified and named (its alias's state, for an
// alias).
func (f *revFile) isDone() bool {
	if f.alias != nil {
		return f.alias.done.Load()
	}
	return f.done.Load()
}

// start is run's hook once the held entry exists: the chunks that lie
// wholly in files this node held already are verified here (their bytes
// were checked against their files' digests), and a file of no bytes is
// sealed at once.
func (r *revision) start(s *swarm) {
	r.s = s
	s.h.rev = r
	for i := 0; i < s.nChunks(); i++ {
		from, to := s.bounds(i)
		if r.heldRange(from, to) {
			s.h.mark(i)
		}
	}
	if err := r.hashAhead(); err != nil {
		r.fail(err)
	}
}

// heldRange says whether bytes from..to lie in files held already.
func (r *revision) heldRange(from, to int64) bool {
	for _, f := range r.files {
		if f.off+f.size <= from || f.off > to || f.size == 0 {
			continue
		}
		if !f.isDone() {
			return false
		}
	}
	return true
}

// each calls fn for every file overlapping off..off+n-1, with the part of
// the range in it: the offset within the file, and the range's own offset
// and length.
func (r *revision) each(off, n int64, fn func(f *revFile, at, pos, m int64) error) error {
	end := off + n
	for _, f := range r.files {
		lo, hi := max(off, f.off), min(end, f.off+f.size)
		if lo >= hi {
			continue
		}
		if err := fn(f, lo-f.off, lo-off, hi-lo); err != nil {
			return err
		}
	}
	return nil
}

// ReadAt reads the revision's bytes from its files.
func (r *revision) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.size {
		return 0, fmt.Errorf("read of %d bytes at %d past the revision's %d", len(p), off, r.size)
	}
	n := 0
	err := r.each(off, int64(len(p)), func(f *revFile, at, pos, m int64) error {
		k, err := f.fh.ReadAt(p[pos:pos+m], at)
		n += k
		return err
	})
	return n, err
}

// WriteAt lands verified bytes in the files they belong to. A file that is
// done already is not written: its bytes are these (both verified), and a
// write would change a named file's mtime, and with it its recorded digest.
func (r *revision) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	err := r.each(off, int64(len(p)), func(f *revFile, at, pos, m int64) error {
		if f.isDone() {
			n += int(m)
			return nil
		}
		k, err := f.fh.WriteAt(p[pos:pos+m], at)
		n += k
		return err
	})
	return n, err
}

// Truncate sizes every .part to its file's size.
func (r *revision) Truncate(int64) error {
	for _, f := range r.files {
		if !f.isDone() && f.alias == nil {
			if err := f.fh.Truncate(f.size); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stat is the revision as the sidecar records it (swarmdisk.go): its size,
// and the newest modification time of its files, which moves with any
// write to one of them, so that a write the sidecar did not see has the
// chunks it recorded verified again.
func (r *revision) Stat() (os.FileInfo, error) {
	var newest time.Time
	for _, f := range r.files {
		fi, err := f.fh.Stat()
		if err != nil {
			return nil, err
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
	}
	return revInfo{size: r.size, mtime: newest}, nil
}

func (r *revision) syncRange(off, n int64) {
	r.each(off, n, func(f *revFile, at, _, m int64) error {
		if !f.isDone() {
			unix.SyncFileRange(int(f.fh.Fd()), at, m, unix.SYNC_FILE_RANGE_WRITE)
		}
		return nil
	})
}

// hashAhead moves each file's running digest over its chunks verified
// since, and seals every file whose last chunk is in. One goroutine at a
// time: the others go on reading chunks, and the next call (or finish)
// takes what they landed meanwhile.
func (r *revision) hashAhead() error {
	if !r.hmu.TryLock() {
		return nil
	}
	defer r.hmu.Unlock()
	return r.hashLocked()
}

func (r *revision) hashLocked() error {
	s := r.s
	var buf []byte
	for _, f := range r.files {
		if f.isDone() || f.alias != nil {
			// An alias is verified and named with its first file.
			continue
		}
		for f.hashed < f.size {
			pos := f.off + f.hashed
			i := int(pos / s.chunk)
			if !s.has(i) {
				break
			}
			_, to := s.bounds(i)
			n := min(to+1, f.off+f.size) - pos
			if f.h != nil {
				if int64(cap(buf)) < n {
					buf = make([]byte, s.chunk)
				}
				b := buf[:n]
				// Through fh, the inode that is renamed: what is hashed is
				// what the rename publishes.
				if _, err := f.fh.ReadAt(b, f.hashed); err != nil {
					s.log.WithError(err).WithField("file", f.name).Debug("swarm: running digest stopped; the file is hashed whole before its rename")
					f.h = nil
				} else {
					f.h.Write(b)
				}
			}
			f.hashed += n
		}
		if f.hashed == f.size {
			if err := r.sealFile(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// sealFile verifies the file whose every chunk is in against its own
// digest, syncs it, tags it and renames its .part to its name, as the
// Fetcher ends a download (fetch.SealHashed), and publishes it on when it
// was staged. A mismatch means the chunks matched digests that are not the
// file's (a bad origin read, or a lying lease holder's digests): nothing of
// the fetch is trusted, and the run ends saying so.
func (r *revision) sealFile(f *revFile) error {
	sum := ""
	if f.h != nil && f.want.SHA256 != "" {
		sum = hex.EncodeToString(f.h.Sum(nil))
	}
	want := f.want
	want.Commit = ""
	part := f.final + catalog.PartSuffix
	if err := fetch.SealHashed(r.ctx, f.fh, part, f.final, want, sum); err != nil {
		os.Remove(part)
		r.accuse(f)
		err = &badFileError{fmt.Errorf("file %s: %w; every chunk of it matched the swarm's digests, so they are not the file's: this file's bytes and the fetch's record of its chunks are dropped", f.name, err)}
		r.fail(err)
		return err
	}
	if f.publish != nil {
		if err := f.publish(); err != nil {
			err = fmt.Errorf("file %s: %w", f.name, err)
			r.fail(err)
			return err
		}
	}
	f.done.Store(true)
	r.s.log.WithField("file", f.name).Debug("swarm: file verified against its digest and named")
	return nil
}

// accuse names the digests the chunks of f (and of the files whose bytes
// land in f's, its aliases) were verified against, in the reports the run
// sends as it ends: a lying lease holder's made-up digests and matching
// bytes pass every chunk check and fail only the file's own (issue 24).
func (r *revision) accuse(f *revFile) {
	named := 0
	for _, g := range r.files {
		if (g == f || g.alias == f) && g.size > 0 {
			named += r.s.accuseRange(g.off, g.off+g.size-1)
		}
	}
	r.s.log.WithFields(logrus.Fields{"file": f.name, "chunks_from_peers": named}).Warn("swarm: every chunk of a file matched its digest and the file does not match its own; telling the coordinator whose digests they were")
}

// badFileError is a file whose chunks all matched their digests and whose
// whole did not match its own: the chunk digests were not the file's.
type badFileError struct{ error }

func (e *badFileError) Unwrap() error { return e.error }

// finish is the run's end, once every chunk is verified: every file
// hashed and sealed (what hashAhead left to the last call), and each
// served file's identity taken for the chunk server.
func (r *revision) finish(ctx context.Context) error {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if err := r.hashLocked(); err != nil {
		return err
	}
	for _, f := range r.files {
		if !f.isDone() {
			return fmt.Errorf("file %s is not verified", f.name)
		}
		f.id = statID(f.serve)
	}
	return nil
}

// open is what the chunk server reads: the files as this fetch holds them
// open while it runs; once complete, the files where they are served
// from, each checked to be the file that was verified (removed or
// replaced since, the revision is no longer served).
func (r *revision) open(complete bool) (heldFile, error) {
	if !complete {
		r.rmu.Lock()
		defer r.rmu.Unlock()
		if r.over {
			// Ended without being complete (its entry is being dropped),
			// or complete a moment ago: the reader asks again.
			return nil, errMoving
		}
		r.readers++
		return &revReader{r: r}, nil
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	return &revFiles{r: r, fhs: make([]*os.File, len(r.files))}, nil
}

// check says whether every file of a complete revision is the one that
// was verified.
func (r *revision) check() error {
	for _, f := range r.files {
		if got := statID(f.serve); got != f.id {
			return fmt.Errorf("%s is no longer the file of the revision (removed or changed since it was verified)", f.serve)
		}
	}
	return nil
}

// retire runs end, which closes the fetch's descriptors, once no answer
// reads through them: at once, or when the last one is done. No answer
// reads through them after it is called.
func (r *revision) retire(end func()) {
	r.rmu.Lock()
	r.over = true
	if r.readers > 0 {
		r.ending = end
		r.rmu.Unlock()
		return
	}
	r.rmu.Unlock()
	end()
}

// revReader reads a revision in progress through the fetch's descriptors.
type revReader struct {
	r    *revision
	once sync.Once
}

func (v *revReader) ReadAt(p []byte, off int64) (int, error) { return v.r.ReadAt(p, off) }

func (v *revReader) Close() error {
	v.once.Do(func() {
		r := v.r
		r.rmu.Lock()
		r.readers--
		end := r.ending
		if r.readers == 0 {
			r.ending = nil
		} else {
			end = nil
		}
		r.rmu.Unlock()
		if end != nil {
			end()
		}
	})
	return nil
}

// revFiles reads a complete revision from its served files, opening each
// as a read reaches it.
type revFiles struct {
	r   *revision
	fhs []*os.File
}

func (v *revFiles) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for i, f := range v.r.files {
		lo, hi := max(off, f.off), min(off+int64(len(p)), f.off+f.size)
		if lo >= hi {
			continue
		}
		if v.fhs[i] == nil {
			fh, err := os.Open(f.serve)
			if err != nil {
				return n, err
			}
			if fi, err := fh.Stat(); err != nil || idOf(fi) != f.id {
				fh.Close()
				return n, fmt.Errorf("%s changed since it was verified", f.serve)
			}
			v.fhs[i] = fh
		}
		k, err := v.fhs[i].ReadAt(p[lo-off:hi-off], lo-f.off)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (v *revFiles) Close() error {
	for _, fh := range v.fhs {
		if fh != nil {
			fh.Close()
		}
	}
	return nil
}

// revInfo is a revision's Stat.
type revInfo struct {
	size  int64
	mtime time.Time
}

func (i revInfo) Name() string       { return "revision" }
func (i revInfo) Size() int64        { return i.size }
func (i revInfo) Mode() fs.FileMode  { return 0o644 }
func (i revInfo) ModTime() time.Time { return i.mtime }
func (i revInfo) IsDir() bool        { return false }
func (i revInfo) Sys() any           { return nil }

// newRevFile is file f of a revision at offset off.
func newRevFile(f revFileSpec, off int64) *revFile {
	rf := &revFile{name: f.name, off: off, size: f.want.Size, want: f.want, final: f.final, publish: f.publish, serve: f.serve}
	if f.want.SHA256 != "" {
		rf.h = sha256.New()
	}
	return rf
}
