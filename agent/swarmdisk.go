package agent

// What a swarm fetch keeps on disk: verified chunks landed in the .part,
// the running digest of the verified prefix, and the sidecar that lets a
// restarted agent keep them.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// sidecar is what survives a crash of a swarm fetch.
type sidecar struct {
	SHA256    string         `json:"sha256"`
	Size      int64          `json:"size"`
	ChunkSize int64          `json:"chunk_size"`
	Have      []byte         `json:"have"`
	Sums      map[int]string `json:"sums,omitempty"` // chunks this node hashed from the origin
	Validator string         `json:"validator,omitempty"`
	// PartSize and PartMtimeNS are the .part's as they were when Have was
	// written: a .part changed since (a write the sidecar did not see) has
	// its chunks verified again before they count.
	PartSize    int64 `json:"part_size"`
	PartMtimeNS int64 `json:"part_mtime_ns"`
}

// landed counts chunk i, verified and written: peers may read it now. Its
// pages are handed to the disk at once, so the fsync before the rename
// finds little left to write (a 256 MiB file written in 85 s otherwise
// left its last 30 s or so of dirty pages to that fsync, on every node at
// the same moment); and the file's running digest moves on.
func (s *swarm) landed(i int) {
	s.h.mark(i)
	from, to := s.bounds(i)
	// Best effort: the fsync in fetch.SealHashed is what makes it durable.
	syncRange(s.fh, from, to-from+1)
	if err := s.hashAhead(); err != nil {
		s.log.WithError(err).Debug("swarm: running digest stopped; the file is hashed whole before the rename")
	}
}

// hashAhead feeds the verified prefix's new chunks to the running digest.
// One goroutine at a time: the others go on reading chunks, and whatever
// they verified meanwhile is taken by the next call or by digest.
func (s *swarm) hashAhead() error {
	if s.rev != nil {
		// Each file of a revision is hashed on its own (swarmrev.go).
		return s.rev.hashAhead()
	}
	if !s.hmu.TryLock() {
		return nil
	}
	defer s.hmu.Unlock()
	return s.hashLocked()
}

func (s *swarm) hashLocked() error {
	if s.hsum == nil {
		s.hsum = sha256.New()
	}
	for s.hashed < s.n && s.has(s.hashed) {
		from, to := s.bounds(s.hashed)
		n := int(to - from + 1)
		if cap(s.hbuf) < n {
			s.hbuf = make([]byte, s.chunk)
		}
		b := s.hbuf[:n]
		// Through fh, the inode that is renamed: what is hashed is what
		// the rename publishes (fetch.SealHashed checks fh is still the
		// .part).
		if _, err := s.fh.ReadAt(b, from); err != nil {
			s.hsum, s.hashed = nil, 0
			return err
		}
		s.hsum.Write(b)
		s.hashed++
	}
	return nil
}

// digest is the whole file's sha256 once every chunk is verified: the
// running digest, finished; or "" (fetch.SealHashed then hashes the file
// itself) when it stopped on a read error.
func (s *swarm) digest() (string, error) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if err := s.hashLocked(); err != nil {
		return "", nil
	}
	if s.hashed != s.n {
		return "", fmt.Errorf("chunk %d of %d is not verified", s.hashed, s.n)
	}
	return hex.EncodeToString(s.hsum.Sum(nil)), nil
}

func (s *swarm) progress() {
	if s.onProgress == nil {
		return
	}
	var done int64
	for i := 0; i < s.n; i++ {
		if s.has(i) {
			f, t := s.bounds(i)
			done += t - f + 1
		}
	}
	s.onProgress(done, s.size)
}

func (s *swarm) loadSidecar() (sidecar, bool) {
	var sc sidecar
	b, err := os.ReadFile(s.target + swarmSuffix)
	if err != nil || json.Unmarshal(b, &sc) != nil || sc.SHA256 != s.sum || sc.Size != s.size || sc.ChunkSize <= 0 {
		return sc, false
	}
	return sc, true
}

// saveSidecar writes the verified bitmap beside the .part, atomically, with
// the .part's size and mtime as they are after the last write.
var sidecarMu sync.Mutex

func (s *swarm) saveSidecar() {
	sidecarMu.Lock()
	defer sidecarMu.Unlock()
	st, err := s.fh.Stat()
	if err != nil {
		return
	}
	s.h.mu.Lock()
	have := append([]byte(nil), s.h.have...)
	s.h.mu.Unlock()
	s.mu.Lock()
	sc := sidecar{SHA256: s.sum, Size: s.size, ChunkSize: s.chunk, Have: have, Validator: s.validator,
		PartSize: st.Size(), PartMtimeNS: st.ModTime().UnixNano(), Sums: map[int]string{}}
	for i, v := range s.mine {
		sc.Sums[i] = v
	}
	s.mu.Unlock()
	b, _ := json.Marshal(sc)
	tmp := s.target + swarmSuffix + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		os.Rename(tmp, s.target+swarmSuffix)
	}
}

// swarmFile is where a swarm fetch's bytes land: the .part of one file
// (an *os.File), or a revision's files end to end (swarmrev.go).
type swarmFile interface {
	io.ReaderAt
	io.WriterAt
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
}

// syncRange starts writing n bytes of f from off to disk: best effort, the
// fsync before a rename is what makes them durable.
func syncRange(f swarmFile, off, n int64) {
	switch f := f.(type) {
	case *os.File:
		unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
	case *revision:
		f.syncRange(off, n)
	}
}

func hexSum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
