package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// A model of several files goes through its fabric's swarm as one revision
// (issue 25): one lease per fabric and revision, the files laid end to end
// in their catalog order as the byte range the swarm cuts into chunks (a
// chunk may span the end of one file and the start of the next), each
// chunk checked against its digest and each file against its own: its
// sha256, or, for a small file of a Hub repository, its git blob id.
//
// A swarm is keyed by a source, a sha256 and a size, the catalog's and
// never a member's (issue 24). For a revision they are:
//
//   - source: the model's own (a Hub model's hf:ORG/NAME@COMMIT, which names
//     the revision; a set's first file's);
//   - sha256: RevisionDigest, the sha256 of the ordered file list with each
//     file's name, size and digest. It changes when any file's bytes, name,
//     place in the order or size does, so two members of one swarm always
//     agree on which bytes sit at which offset; it is no digest of the bytes
//     (each file has its own, checked before the file gets its name);
//   - size: the sum of the files' sizes.
//
// The chunk digest list a swarm records with the pin (migration 0009) is
// that of the concatenated bytes, in the swarm's chunks: one row per
// (source, revision digest, chunk size), gone with the entry or its pin as a
// single file's is.

// RevisionFile is one file of a revision as the swarm lays it out.
type RevisionFile struct {
	// Name is where it lands: its path in a Hub repository, or its file
	// name in a set directory.
	Name string
	Size int64
	// SHA256 is the file's sha256; GitBlob, for a small file of a Hub
	// repository, its git blob id instead. Exactly one is set.
	SHA256  string
	GitBlob string
}

// HubRevision is the Hub model h as a revision: its files in their catalog
// order (by path).
func HubRevision(h Hub) []RevisionFile {
	out := make([]RevisionFile, len(h.Files))
	for i, f := range h.Files {
		out[i] = RevisionFile{Name: f.Path, Size: f.Size, SHA256: f.SHA256, GitBlob: f.Blob}
	}
	return out
}

// SetRevision is the model of several files m as a revision, in the order
// of its files; ok is false when a file has no pinned sha256 or no size
// yet, which a swarm needs (the first verified fetch of each file pins it).
func SetRevision(m Model) (files []RevisionFile, ok bool) {
	out := make([]RevisionFile, len(m.Files))
	for i, f := range m.Files {
		sum := strings.ToLower(f.WantSHA256())
		if sum == "" || f.Size <= 0 {
			return nil, false
		}
		out[i] = RevisionFile{Name: FileName(f.Source), Size: f.Size, SHA256: sum}
	}
	return out, true
}

// revisionFormat heads what RevisionDigest hashes: another layout (a field
// added) is another digest, never a collision with this one.
const revisionFormat = "llmgw revision 1\n"

// RevisionDigest is the swarm's sha256 of a revision: of its files in
// order, each as its name's length and name, its size and its digest.
func RevisionDigest(files []RevisionFile) string {
	h := sha256.New()
	h.Write([]byte(revisionFormat))
	for _, f := range files {
		digest := "sha256:" + strings.ToLower(f.SHA256)
		if f.SHA256 == "" {
			digest = "gitblob:" + strings.ToLower(f.GitBlob)
		}
		fmt.Fprintf(h, "%d:%s %d %s\n", len(f.Name), f.Name, f.Size, digest)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RevisionSize is the sum of the files' sizes: the swarm's size.
func RevisionSize(files []RevisionFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Size
	}
	return n
}
