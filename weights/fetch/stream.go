package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
)

// One connection, appended to the .part as it arrives, with the digest
// computed behind the write position instead of in a second pass.

// stream fetches with one connection, appending to the .part from off; b is
// the open response whose body starts at off.
func (d *download) stream(ctx context.Context, st *rangeState, b *body, off int64) (string, error) {
	// b is replaced on every reconnect, and is nil after a failed one.
	defer func() {
		if b != nil {
			b.Close()
		}
	}()
	d.total.Store(st.Size)
	release, err := d.claimSpace(ctx, st.Size-off, st.Size)
	if err != nil {
		return "", &Error{Source: d.rem.source, Op: "get", Err: err}
	}
	defer release()
	// Without a length nothing could be claimed up front: the stream
	// watches the free space instead, and stops at the reserve.
	reserve, nextCheck := int64(-1), int64(0)
	if st.Size < 0 {
		reserve = d.f.reserve(filepath.Dir(d.part))
	}
	fh := d.fh
	if off == 0 {
		if err := fh.Truncate(0); err != nil {
			return "", &Error{Source: d.rem.source, Op: "write", Err: err}
		}
	}
	// The state is written before any byte, so bytes on disk always have a
	// recorded provenance. Without a validator there is nothing to record.
	if st.validator() != "" {
		if err := st.save(d.statePath); err != nil {
			return "", &Error{Source: d.rem.source, Op: "write", Err: err}
		}
	}
	d.done.Store(off)

	// Everything before the write position is final: a second goroutine
	// hashes it from the page cache as it grows, so verifying costs no
	// second pass after the last byte (and a resumed stream's earlier bytes
	// are hashed too).
	var (
		frontier atomic.Int64
		complete atomic.Bool
		poke     = make(chan struct{}, 1)
		hashed   chan hashResult
	)
	frontier.Store(off)
	wb := &writeBehind{fd: int(fh.Fd()), from: off}
	wrote := func(end int64) error {
		wb.wrote(end)
		frontier.Store(end)
		select {
		case poke <- struct{}{}:
		default:
		}
		if reserve >= 0 && end >= nextCheck {
			margin, err := d.checkReserve(reserve)
			// Far from the reserve, look again only when half the margin
			// is used; close to it, at every write.
			nextCheck = end + margin/2
			return err
		}
		return nil
	}
	// Even with no digest to check: the caller then reports the digest for
	// the cluster to pin (see Digest), and a second pass after the last
	// byte would cost it minutes of its deadline.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	hashed = make(chan hashResult, 1)
	go func() {
		// complete is read first: it is set after the last frontier.
		limit := func() (int64, bool) { c := complete.Load(); return frontier.Load(), c }
		sum, err := hashBehind(hctx, fh, limit, poke)
		hashed <- hashResult{sum, err}
	}()
	for retry := 0; ; {
		// With a known size, a body that ends short of it is cut, whether
		// the client noticed (Content-Length) or not (chunked): one rule
		// with the parallel path, retried from where it stopped.
		limit := int64(-1)
		if st.Size >= 0 {
			limit = st.Size - off
		}
		n, err := d.copyAt(fh, b, off, limit, wrote)
		off += n
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var we *writeError
		if errors.As(err, &we) {
			return "", &Error{Source: d.rem.source, Op: "write", Err: d.giveBack(noSpace(we.err, filepath.Dir(d.part), st.Size-off))}
		}
		var slow errSlow
		if n > 0 && !errors.As(err, &slow) {
			retry = 0 // progress: the budget is for a connection that gets nowhere, or a trickle
		}
		if retry++; retry > d.f.retries() {
			return "", err
		}
		if err := d.sleep(ctx, retry, 0, err); err != nil {
			return "", err
		}
		b.Close()
		b = nil
		if st.validator() == "" {
			// Nothing to make a resumed range safe with.
			return "", fmt.Errorf("%w (no ETag or Last-Modified to resume against)", errRestart)
		}
		if b, err = d.open(ctx, off, -1, st.validator()); err != nil {
			return "", err
		}
		if err := d.checkRange(b.resp, st, off, -1); err != nil {
			return "", err
		}
	}
	if st.Size >= 0 && off != st.Size {
		return "", fmt.Errorf("got %d bytes, the origin announced %d", off, st.Size)
	}
	if hashed != nil {
		complete.Store(true)
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	return d.seal(ctx, hashed, off)
}

type hashResult struct {
	sum string
	err error
}

// hashBehind hashes fh from 0, never reading past what limit reports as
// final, until limit reports the file complete; it waits on poke for the
// limit to move.
func hashBehind(ctx context.Context, fh *os.File, limit func() (end int64, complete bool), poke <-chan struct{}) (string, error) {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var pos int64
	for {
		end, complete := limit()
		for pos < end {
			n, err := fh.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			h.Write(buf[:n])
			pos += int64(n)
			if err != nil && !(err == io.EOF && pos == end) {
				return "", err
			}
		}
		if complete {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-poke:
		}
	}
}
