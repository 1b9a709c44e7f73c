package agent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	mrand "math/rand/v2"
)

// TestSwarmRunningDigest: the whole-file digest the swarm computes as
// chunks land, in any order and from several goroutines' worth of
// interleaving, is the sha256 of the file on disk, and it is read through
// the descriptor: bytes changed under a chunk before it joins the verified
// prefix are what the digest sees.
func TestSwarmRunningDigest(t *testing.T) {
	const chunk, size = 4096, 4096*9 + 123
	data := make([]byte, size)
	rand.Read(data)
	part := filepath.Join(t.TempDir(), "f.part")
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	s := &swarm{size: size, chunk: chunk, fh: fh, log: logrus.New()}
	s.n = s.nChunks()
	s.h = &held{path: part, size: size, chunkSize: chunk}

	order := mrand.Perm(s.n)
	for k, i := range order {
		from, to := s.bounds(i)
		if _, err := fh.WriteAt(data[from:to+1], from); err != nil {
			t.Fatal(err)
		}
		s.landed(i)
		if k < s.n-1 {
			if _, err := s.digest(); err == nil {
				t.Fatalf("digest with %d of %d chunks: no error", k+1, s.n)
			}
		}
	}
	got, err := s.digest()
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if got != hex.EncodeToString(want[:]) {
		t.Fatalf("running digest %s, file's %x (order %v)", got, want, order)
	}
	t.Logf("%d chunks landed in order %v", s.n, order)

	// A file whose bytes differ from what was written before the chunk
	// joined the prefix: the digest is of the disk's bytes, so sealing
	// refuses it against the pin.
	s2 := &swarm{size: size, chunk: chunk, fh: fh, log: logrus.New()}
	s2.n = s2.nChunks()
	s2.h = &held{path: part, size: size, chunkSize: chunk}
	if _, err := fh.WriteAt([]byte{data[5] ^ 0xff}, 5); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < s2.n; i++ {
		s2.landed(i)
	}
	bad, err := s2.digest()
	if err != nil {
		t.Fatal(err)
	}
	if bad == got {
		t.Fatal("the digest did not see a byte changed on disk")
	}
}
