package fetch

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// A model of several files is claimed whole. Claimed file by file, a
// 3 × 38 MB set on 103 MB free failed at its last file, and the 76 MB
// already fetched stayed (the model is wanted), so every retry failed at
// the same file and other models got what was left. ClaimSet claims what
// the whole set will still write, before its first byte, against the same
// record every fetch on the node claims in; a set that cannot fit fetches
// nothing. The files' own fetches then find the set's claim and claim
// nothing more: the set's claim shrinks as its directory fills.

// SetFile is one file of a set as ClaimSet needs it: its source, and its
// size when the catalog knows it (0: asked of the origin).
type SetFile struct {
	Source string
	Size   int64
}

// setClaimFor is how long a set's claim lasts after its last renewal: each
// ClaimSet renews it, and a set whose fetch was given up stops holding
// room for nobody.
const setClaimFor = 10 * time.Minute

// ClaimSet claims the room the set directory set (catalog.SetName, under
// CacheDir) will still need for files, evicting first (MakeRoom) when it
// does not fit, and fails with ErrNoSpace, before any file is fetched,
// when it cannot. Sizes the catalog does not give are asked of the origin
// (a one-byte range request per file). Calling it again for the same set
// renews the claim; it lapses setClaimFor after the last call, or when
// the set is complete.
func (f *Fetcher) ClaimSet(ctx context.Context, set string, files []SetFile) error {
	if !catalog.IsSetName(set) {
		return fmt.Errorf("%q is not a set directory's name", set)
	}
	dir := filepath.Join(f.CacheDir, set)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("set directory: %w", err)
	}
	var total int64
	for _, sf := range files {
		size := sf.Size
		if fi, err := os.Lstat(catalog.SetFilePath(dir, sf.Source)); err == nil && fi.Mode().IsRegular() && size <= 0 {
			// Already there, whole (only a verified file gets its name):
			// its size is known without asking the origin.
			size = fi.Size()
		}
		if size <= 0 {
			f.mu.Lock()
			size = f.sizes[sf.Source]
			f.mu.Unlock()
		}
		if size <= 0 {
			n, err := f.probeSize(ctx, sf.Source)
			if err != nil {
				return &Error{Source: sf.Source, Op: "head", Err: fmt.Errorf("the set's size cannot be claimed before its first byte without it: %w", err)}
			}
			size = n
			f.mu.Lock()
			if f.sizes == nil {
				f.sizes = map[string]int64{}
			}
			f.sizes[sf.Source] = n
			f.mu.Unlock()
		}
		total += size
	}
	c := claim{PID: os.Getpid(), Part: dir, Size: total, Set: true, Until: time.Now().Add(setClaimFor).UnixNano()}
	need := c.remaining()
	b, err := f.openBook(ctx, dir)
	if err != nil {
		return checkSpace(dir, need)
	}
	if b, err = f.fit(ctx, b, dir, need, b.has(dir, true), func(b *spaceBook) (int64, int) { return b.othersThan(dir) }); err != nil {
		if b == nil && !isNoSpace(err) {
			return checkSpace(dir, need)
		}
		return setNoRoom(len(files), total, err)
	}
	b.drop(dir)
	b.claims = append(b.claims, c)
	return b.close()
}

func setNoRoom(n int, total int64, err error) error {
	return fmt.Errorf("a model of %d files (%s in all) is claimed whole before its first byte, and does not fit: %w; nothing of it was fetched",
		n, catalog.FormatBytes(total), err)
}

// claimSetOf claims the set directory set whole for a fetch of source,
// one of its files, from its manifest (written before the first file; see
// catalog.WriteManifest): the manifest's sizes, and its sources for those
// it has none of, source itself whole (the manifest's are redacted). A
// set without a manifest is claimed file by file, as before.
func (f *Fetcher) claimSetOf(ctx context.Context, set, source string) error {
	man, err := catalog.ReadManifest(filepath.Join(f.CacheDir, set))
	if err != nil {
		return nil
	}
	files := make([]SetFile, len(man.Files))
	for i, mf := range man.Files {
		files[i] = SetFile{Source: mf.Source, Size: mf.Size}
		if mf.Name == catalog.FileName(source) {
			files[i].Source = source
		}
	}
	return f.ClaimSet(ctx, set, files)
}

// probeSize asks the origin the size of source: a HEAD, else (an origin
// that refuses HEAD, as a URL signed for GET does) a one-byte range
// request, through the same request path as a fetch (hub token, redirect
// rules; the range request with retries).
func (f *Fetcher) probeSize(ctx context.Context, source string) (int64, error) {
	rem, err := parseRemote(source, f.hfEndpoint())
	if err != nil {
		return 0, err
	}
	d := &download{f: f, rem: rem, log: f.logger()}
	if rem.hf {
		if d.token, err = f.hfToken(); err != nil {
			return 0, err
		}
	}
	if n, ok := d.head(ctx); ok {
		return n, nil
	}
	b, err := d.open(ctx, 0, 0, "")
	if err != nil {
		return 0, err
	}
	defer b.Close()
	resp := b.resp
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1))
	if resp.StatusCode == http.StatusPartialContent {
		if cr, err := parseContentRange(resp.Header.Get("Content-Range")); err == nil && cr.size >= 0 {
			return cr.size, nil
		}
	}
	if resp.StatusCode == http.StatusOK && resp.ContentLength >= 0 {
		return resp.ContentLength, nil
	}
	return 0, fmt.Errorf("the origin gave no size (%s, Content-Range %q)", resp.Status, resp.Header.Get("Content-Range"))
}

// head asks the origin for the file's length with a HEAD.
func (d *download) head(ctx context.Context) (int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, d.f.idleTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, d.rem.url, nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "llmgw")
	if d.token != "" && req.URL.Host == d.rem.hubHost {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client().Do(req)
	if err != nil {
		return 0, false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength < 0 {
		return 0, false
	}
	return resp.ContentLength, true
}

// dirUsage is the bytes the regular files directly in dir occupy.
func dirUsage(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += int64(st.Blocks) * 512
			} else {
				n += fi.Size()
			}
		}
	}
	return n
}
