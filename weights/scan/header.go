package scan

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Headers: a weight file whose name is right can still be a download cut
// short (an 8-byte .gguf, a safetensors file whose header announces more
// tensor data than the file holds). Both formats say at their start how
// they are laid out, so reading the first bytes tells a whole file from a
// cut one without reading the data. The answer is kept per file by device,
// inode, size and modification time, so a rescan of an unchanged tree
// reads no file again.

// maxHeaderRead bounds how much of a safetensors header is read to find
// where its tensor data ends. Real headers are a few KB to a few hundred
// KB (one entry per tensor); the format allows up to 100 MB, and a header
// past this bound is checked for its length only.
const maxHeaderRead = 4 << 20

type headerKey struct {
	id          devIno
	size, mtime int64
}

// headerCache holds each checked file's verdict ("" for whole). It is
// bounded: past maxCached entries it starts over, which costs one read
// per file on the next scan and nothing else.
var headerCache = struct {
	sync.Mutex
	m map[headerKey]string
}{m: map[headerKey]string{}}

const maxCached = 1 << 16

// headerProblem says why the weight file at p, as st describes it, is not
// whole, or "". Only .safetensors and .gguf are read; other formats
// (.bin, .pt, .pth pickles) have no header that says their length. A file
// under a cache name is not read either: llmgw's fetcher renamed it there
// only after checking its size against the origin's and its digest, and
// what the origin serves is the catalog's business.
func headerProblem(p string, st fileStat) string {
	if catalog.IsCacheName(path.Base(p)) {
		return ""
	}
	lower := strings.ToLower(p)
	gguf := strings.HasSuffix(lower, ".gguf")
	if !gguf && !strings.HasSuffix(lower, ".safetensors") {
		return ""
	}
	if st.size == 0 {
		return "" // said elsewhere: an empty file
	}
	key := headerKey{st.id, st.size, st.mtime}
	headerCache.Lock()
	v, ok := headerCache.m[key]
	headerCache.Unlock()
	if ok {
		return v
	}
	if gguf {
		v = ggufProblem(p, st.size)
	} else {
		v = safetensorsProblem(p, st.size)
	}
	headerCache.Lock()
	if len(headerCache.m) >= maxCached {
		headerCache.m = map[headerKey]string{}
	}
	headerCache.m[key] = v
	headerCache.Unlock()
	return v
}

// settling says when a weight file modified recently is not yet taken as
// finished (Options.Settle), or "".
func (s *walker) settling(p string, st fileStat) string {
	// A file in a set directory (catalog.SetName) is llmgw's fetcher's
	// too, renamed there only whole.
	if s.opt.Settle <= 0 || catalog.IsCacheName(path.Base(p)) || catalog.IsSetName(path.Base(path.Dir(p))) {
		return ""
	}
	if s.opt.Memory.sameSize(st) {
		// As large as at the last scan: not seen growing. A touch (an
		// rsync that found nothing to copy, a backup tool restoring
		// times) changes the mtime only, and must not make the model
		// vanish from status and features for a scan interval; the
		// header, read again for the new mtime, still says whether the
		// bytes are whole.
		return ""
	}
	if ago := s.now.Sub(time.Unix(0, st.mtime)); ago < s.opt.Settle {
		return fmt.Sprintf("modified %s ago: still being written?", max(ago, 0).Round(time.Millisecond))
	}
	return ""
}

// openData opens a weight file for its header: O_NONBLOCK, so that a FIFO
// put in its place does not stall the scan.
func openData(p string) (*os.File, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// ggufProblem checks GGUF's fixed header: the magic "GGUF" and room for
// the version and the two counts after it (24 bytes). The version is not
// judged: a newer llama.cpp may know one this does not.
func ggufProblem(p string, size int64) string {
	if size < 24 {
		return fmt.Sprintf("%d bytes, too short for a GGUF header (cut short?)", size)
	}
	f, err := openData(p)
	if err != nil {
		return "unreadable: " + errText(err)
	}
	defer f.Close()
	var h [24]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return "unreadable: " + errText(err)
	}
	if string(h[:4]) != "GGUF" {
		return "not a GGUF file (no GGUF magic at its start)"
	}
	return ""
}

// safetensorsProblem checks a safetensors file: an 8-byte little-endian
// header length, a JSON header of that length, and tensor data ending
// exactly where the file ends (the largest data_offsets end).
func safetensorsProblem(p string, size int64) string {
	if size < 8 {
		return fmt.Sprintf("%d bytes, too short for a safetensors header (cut short?)", size)
	}
	f, err := openData(p)
	if err != nil {
		return "unreadable: " + errText(err)
	}
	defer f.Close()
	var lb [8]byte
	if _, err := f.ReadAt(lb[:], 0); err != nil {
		return "unreadable: " + errText(err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n < 2 || n > uint64(size-8) {
		return fmt.Sprintf("its header announces %d bytes of header, the file holds %d in all (cut short, or not safetensors?)", n, size)
	}
	if n > maxHeaderRead {
		return ""
	}
	var hdr map[string]json.RawMessage
	if err := json.NewDecoder(io.NewSectionReader(f, 8, int64(n))).Decode(&hdr); err != nil {
		return "its header is not valid JSON (not safetensors?)"
	}
	var end uint64
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Offsets []uint64 `json:"data_offsets"`
		}
		if json.Unmarshal(raw, &t) != nil || len(t.Offsets) != 2 {
			return fmt.Sprintf("its header's tensor %q has no data_offsets (not safetensors?)", name)
		}
		end = max(end, t.Offsets[1])
	}
	if want := 8 + n + end; want > uint64(size) {
		return fmt.Sprintf("its header announces %d bytes, the file holds %d (cut short?)", want, size)
	}
	return ""
}
