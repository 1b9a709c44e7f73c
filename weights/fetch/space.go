package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Space is claimed, not hoped for. Each fetch checked the free space alone,
// so two that each fit but together did not both started, both died at
// ENOSPC, and left the disk full. Now a fetch claims the bytes it will
// still write in a per-filesystem record in the lock directory, and a new
// fetch must fit in what is free minus what the fetches in flight will
// still write.

// DefaultReserveShare and DefaultReserveMax make the default cache_reserve:
// 5% of the cache's filesystem, but no more than 10 GB. A stream without a
// Content-Length stops when the filesystem is down to the reserve. 5% keeps
// a small disk from being filled to its last block; the cap keeps a
// multi-terabyte cache disk, which exists to hold models, from holding back
// hundreds of gigabytes for a rare kind of origin. The blocks ext4 reserves
// for root are not counted in either: the free space is f_bavail.
const (
	DefaultReserveShare = 0.05
	DefaultReserveMax   = 10_000_000_000
)

// claim is one fetch in flight: the .part it writes and the size it will
// have when complete (-1 when the origin gave none).
type claim struct {
	PID  int    `json:"pid"`
	Part string `json:"part"`
	Size int64  `json:"size"`
	// Set marks the claim of a whole set (ClaimSet): Part is its directory,
	// Size every file's, and what its directory holds is what is done. A
	// Hub model's claim (claimHub) is one too, on its blobs directory.
	Set bool `json:"set,omitempty"`
	// Base is what the directory held when the claim was made, for a
	// directory that holds other files than the claim's (a Hub
	// repository's blobs of other revisions): only what it gains since
	// is done.
	Base int64 `json:"base,omitempty"`
	// Stage, for a Hub model's claim, is the staging directory its blobs
	// are fetched into before they move into Part, when that is on the
	// same filesystem: what it gains is done too (Base counts both), and
	// a file fetched there falls under this claim instead of claiming
	// its own room beside it.
	Stage string `json:"stage,omitempty"`
	// Until, when set, is when the claim lapses (Unix nanoseconds).
	Until int64 `json:"until,omitempty"`
}

// remaining is what the claim's fetch will still write: its size less what
// its .part already occupies, which statfs already counts as used.
func (c claim) remaining() int64 {
	if c.Size <= 0 {
		return 0
	}
	if c.Set {
		return max(0, min(c.Size, c.Size-(c.usage()-c.Base)))
	}
	var st unix.Stat_t
	if unix.Stat(c.Part, &st) != nil {
		return c.Size
	}
	return max(0, c.Size-st.Blocks*512)
}

// usage is what a set claim's directories hold now: its directory, and
// its staging directory when it has one.
func (c claim) usage() int64 {
	n := dirUsage(c.Part)
	if c.Stage != "" {
		n += dirUsage(c.Stage)
	}
	return n
}

// alive reports whether the process that made the claim still runs. A
// killed fetch leaves its claim behind; it is dropped at the next look.
func (c claim) alive() bool {
	if c.Until != 0 && time.Now().UnixNano() > c.Until {
		return false
	}
	if c.Set && c.remaining() == 0 {
		return false // the set is complete
	}
	return c.PID == os.Getpid() || unix.Kill(c.PID, 0) != unix.ESRCH
}

// spaceBook is the record of claims on one filesystem, open and flocked.
type spaceBook struct {
	fh     *os.File
	claims []claim
}

// openBook locks and reads the claims on the filesystem holding dir. The
// record lives in the lock directory (node-local, like the locks), one file
// per filesystem, named by its device number.
func (f *Fetcher) openBook(ctx context.Context, dir string) (*spaceBook, error) {
	ldir, err := f.lockDir()
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	fh, err := os.OpenFile(filepath.Join(ldir, fmt.Sprintf("space-%d.json", st.Dev)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("space record: %w", err)
	}
	if err := f.flockWait(ctx, fh, "waiting for the node's record of disk space claimed by fetches"); err != nil {
		fh.Close()
		return nil, err
	}
	b := &spaceBook{fh: fh}
	if data, err := io.ReadAll(fh); err == nil && len(data) > 0 {
		// An unreadable record is rebuilt from nothing: the claims it held
		// belong to fetches that will re-claim at their next start.
		json.Unmarshal(data, &b.claims)
	}
	b.claims = slices.DeleteFunc(b.claims, func(c claim) bool { return !c.alive() })
	return b, nil
}

// othersThan is what the claims other than the one on path will still
// write, whoever made them.
func (b *spaceBook) othersThan(path string) (bytes int64, n int) {
	for _, c := range b.claims {
		if c.Part == path {
			continue
		}
		if r := c.remaining(); r > 0 {
			bytes += r
			n++
		}
	}
	return bytes, n
}

// setOf is the live set claim a fetch into dir falls under, if any: a
// set's directory, or a Hub model's staging directory.
func (b *spaceBook) setOf(dir string) bool {
	for _, c := range b.claims {
		if c.Set && (c.Part == dir || c.Stage != "" && c.Stage == dir) {
			return true
		}
	}
	return false
}

// others is what the claims other than part's will still write.
func (b *spaceBook) others(part string) (bytes int64, n int) {
	for _, c := range b.claims {
		if c.Part == part && c.PID == os.Getpid() {
			continue
		}
		if r := c.remaining(); r > 0 {
			bytes += r
			n++
		}
	}
	return bytes, n
}

// has says whether the record holds a live claim on part: this
// process's, or with anyPID anyone's (a set's or a Hub model's claim on
// its directory, which any process renews).
func (b *spaceBook) has(part string, anyPID bool) bool {
	for _, c := range b.claims {
		if c.Part == part && (anyPID || c.PID == os.Getpid()) {
			return true
		}
	}
	return false
}

// close writes the claims back and releases the record.
func (b *spaceBook) close() error {
	data, _ := json.Marshal(b.claims)
	_, err := b.fh.WriteAt(data, 0)
	if err == nil {
		err = b.fh.Truncate(int64(len(data)))
	}
	if cerr := b.fh.Close(); err == nil {
		err = cerr
	}
	return err
}

func (b *spaceBook) set(c claim) {
	b.drop(c.Part)
	b.claims = append(b.claims, c)
}

func (b *spaceBook) drop(part string) {
	b.claims = slices.DeleteFunc(b.claims, func(c claim) bool { return c.Part == part && c.PID == os.Getpid() })
}

// claimSpace refuses a fetch that cannot fit beside the fetches in flight on
// the same filesystem, and otherwise records its claim: need more bytes to
// write to reach size (size < 0: unknown, nothing claimed). The claim is
// dropped by the returned release, or by the next look after the process
// dies.
func (d *download) claimSpace(ctx context.Context, need, size int64) (release func(), err error) {
	return d.f.ClaimSpace(ctx, d.part, need, size)
}

// ClaimSpace claims, in the node's record of space on the filesystem
// holding part, that part will still have need bytes written to reach
// size (size < 0: unknown, nothing claimed): refused with ErrNoSpace when
// it cannot fit beside the fetches in flight even after MakeRoom evicted
// for it. A file of a set claimed whole (ClaimSet) claims nothing more.
// The claim is dropped by release, or by the next look after this process
// dies. Every writer of the cache claims here: the fetcher's downloads do,
// and a fetch through peers (the swarm) or a prefetch must too, so that
// one budget holds them all. A prefetch (Ahead) is held to PrefetchRoom
// (the agent's Room at evict.Prefetch) and never evicts.
func (f *Fetcher) ClaimSpace(ctx context.Context, part string, need, size int64) (release func(), err error) {
	dir := filepath.Dir(part)
	b, err := f.openBook(ctx, dir)
	if err != nil {
		// No record: the fetch still has the plain check and ENOSPC.
		f.logger().WithError(err).Warn("cannot record the disk space this fetch claims")
		return func() {}, checkSpace(dir, need)
	}
	if b.setOf(dir) {
		// A file of a set claimed whole: its room is in the set's claim.
		b.close()
		return func() {}, nil
	}
	if b, err = f.fit(ctx, b, dir, need, b.has(part, false), func(b *spaceBook) (int64, int) { return b.others(part) }); err != nil {
		if b == nil && !isNoSpace(err) {
			return func() {}, checkSpace(dir, need)
		}
		return nil, err
	}
	b.set(claim{PID: os.Getpid(), Part: part, Size: size})
	if err := b.close(); err != nil {
		f.logger().WithError(err).Warn("cannot record the disk space this fetch claims")
	}
	return func() {
		b, err := f.openBook(context.WithoutCancel(ctx), dir)
		if err != nil {
			return
		}
		b.drop(part)
		b.close()
	}, nil
}

// fit checks that need bytes fit on the filesystem holding dir beside
// what the other claims (others, of the open record b) will still write,
// and, when they do not, asks MakeRoom to evict the shortfall first, with
// the record released (eviction reads it too, and a fetch elsewhere may be
// waiting on it). A fetch ahead of any job (Ahead) asks PrefetchRoom
// first instead (unless the claim is a renewal of one the record holds),
// and never MakeRoom. It returns the record, open, when
// they fit; else an ErrNoSpace error with the record closed, or, when the
// record could not be opened again, a nil record and that error.
func (f *Fetcher) fit(ctx context.Context, b *spaceBook, dir string, need int64, renewal bool, others func(*spaceBook) (int64, int)) (*spaceBook, error) {
	if need <= 0 {
		return b, nil
	}
	ahead := IsAhead(ctx)
	if ahead && f.PrefetchRoom != nil && !renewal {
		// Asked when the claim is made, not when it is renewed (a Hub
		// model's or a set's, at each file): what it still needs only
		// shrinks, and the budget counts the claim being renewed.
		b.close()
		ok, why := f.PrefetchRoom(ctx, dir, need)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNoSpace, why)
		}
		var err error
		if b, err = f.openBook(ctx, dir); err != nil {
			return nil, err
		}
	}
	free, mount, serr := statfsFree(dir)
	o, n := others(b)
	if serr != nil || need <= free-o {
		return b, nil // unknowable, or fits; ENOSPC during the fetch still says it clearly
	}
	held := ""
	if ahead {
		held = "a prefetch evicts nothing"
	} else if f.MakeRoom != nil {
		b.close()
		_, held = f.MakeRoom(ctx, dir, need-(free-o))
		var err error
		if b, err = f.openBook(ctx, dir); err != nil {
			return nil, err
		}
		free, mount, serr = statfsFree(dir)
		o, n = others(b)
		if serr != nil || need <= free-o {
			return b, nil
		}
	}
	b.close()
	return nil, noRoom(need, free, o, n, mount, held)
}

// noRoom is the refusal of a fetch of need bytes that did not fit; held,
// when set, is what eviction could not remove and why.
func noRoom(need, free, others int64, n int, mount, held string) error {
	msg := fmt.Sprintf("needs %s, %s free on %s", catalog.FormatBytes(need), catalog.FormatBytes(free), mount)
	if n > 0 {
		msg += fmt.Sprintf(" of which %s is claimed by fetches in flight (%d)", catalog.FormatBytes(others), n)
	}
	if held != "" {
		msg += "; " + held
	}
	return fmt.Errorf("%w: %s", ErrNoSpace, msg)
}

// Claimed is what the fetches in flight on the filesystem holding dir
// will still write: the room eviction must leave them.
func (f *Fetcher) Claimed(ctx context.Context, dir string) (int64, error) {
	b, err := f.openBook(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer b.close()
	n, _ := b.others("")
	return n, nil
}

// Reserve is the free space a stream without a length leaves on the
// filesystem holding dir (cache_reserve, or its default); 0 for none.
func (f *Fetcher) Reserve(dir string) int64 { return max(0, f.reserve(dir)) }

// reserve is the free space a stream without a length leaves on the
// filesystem: CacheReserve, or by default 5% of it up to 10 GB; -1 for
// none.
func (f *Fetcher) reserve(dir string) int64 {
	if f.CacheReserve != 0 {
		return max(f.CacheReserve, -1)
	}
	r, err := statRoom(dir)
	if err != nil {
		return 0
	}
	return min(int64(float64(r.Total)*DefaultReserveShare), DefaultReserveMax)
}

// checkReserve stops a stream without a length that has reached the
// reserve; otherwise it returns how far off the reserve is.
func (d *download) checkReserve(reserve int64) (margin int64, err error) {
	dir := filepath.Dir(d.part)
	free, mount, err := statfsFree(dir)
	if err != nil {
		return 0, nil
	}
	others := int64(0)
	if b, err := d.f.openBook(context.Background(), dir); err == nil {
		others, _ = b.others(d.part)
		b.close()
	}
	if margin = free - others - reserve; margin <= 0 {
		return 0, fmt.Errorf("%w: the origin gave no length and %s is down to its cache_reserve of %s (%s free, %s claimed by other fetches)",
			ErrNoSpace, mount, catalog.FormatBytes(reserve), catalog.FormatBytes(free), catalog.FormatBytes(others))
	}
	return margin, nil
}

// isNoSpace reports whether err is the disk running out: ENOSPC, or a
// stream stopped at the reserve.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, ErrNoSpace)
}
