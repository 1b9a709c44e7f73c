package prolog

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ClaimGC decides whether this Epilog runs node gc: none has started it
// within interval, and no other Epilog on the node is running it now. It
// then stamps the claim (the stamp's modification time) and returns a
// release to call when gc is done. Several jobs ending together each run
// an Epilog; one of them collects, the others return at once.
//
// The stamp is set when gc starts, not when it ends, so a gc that fails or
// is cut short by its time bound is not retried by every following Epilog.
func ClaimGC(runDir string, interval time.Duration, now time.Time) (release func(), ok bool, err error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, false, err
	}
	p := filepath.Join(runDir, GCStampFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil // another Epilog is collecting
		}
		return nil, false, &os.PathError{Op: "flock", Path: p, Err: err}
	}
	release = func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}
	st, err := f.Stat()
	if err != nil {
		release()
		return nil, false, err
	}
	// A stamp just created has the time of now (its size tells it apart).
	fresh := st.Size() > 0 && stampRecent(st.ModTime(), interval, now)
	if fresh {
		release()
		return nil, false, nil
	}
	// The size marks a stamp that was set, as opposed to one just created.
	if _, err := f.WriteAt([]byte(now.UTC().Format(time.RFC3339)+"\n"), 0); err != nil {
		release()
		return nil, false, err
	}
	if err := os.Chtimes(p, now, now); err != nil {
		release()
		return nil, false, err
	}
	return release, true, nil
}

// stampRecent says whether a gc stamp set at mt was set within interval
// before now. A stamp in the future (a clock that went backwards) is not
// trusted: gc is then due. GCDue and ClaimGC must agree on this.
func stampRecent(mt time.Time, interval time.Duration, now time.Time) bool {
	return now.Sub(mt) < interval && !mt.After(now)
}
