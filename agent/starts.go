package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Job starts (issue 28): whether each llmgw job's Prolog found its weights
// on the fast path (a warm start) or had to hand the job to llmgw prolog (a
// cold one), for the coordinator to count per job over its nodes. The
// Prolog leaves a job record in the run dir either way, the fast path's
// marked Fast; the agent watches the directory with inotify, since a
// record lives only as long as its job and a short job's would be gone by
// the next scan, and the hooks never wait on the agent for this.

// maxPendingStarts bounds the starts kept for the next report: a
// coordinator away for long loses the oldest, never the agent's memory.
const maxPendingStarts = 512

type startWatch struct {
	a  *Agent
	mu sync.Mutex
	// queue are the starts not yet in a delivered report; seen the jobs
	// already taken (bounded: cleared when large, which at worst counts a
	// job's start again after its record changed).
	queue []api.JobStart
	seen  map[string]bool
}

func newStartWatch(a *Agent) *startWatch {
	return &startWatch{a: a, seen: map[string]bool{}}
}

// pending is what the next report carries.
func (w *startWatch) pending() []api.JobStart {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	return append([]api.JobStart(nil), w.queue...)
}

// delivered drops the starts a report the coordinator took carried.
func (w *startWatch) delivered(sent []api.JobStart) {
	if len(sent) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	done := make(map[string]bool, len(sent))
	for _, s := range sent {
		done[s.Job] = true
	}
	keep := w.queue[:0]
	for _, s := range w.queue {
		if !done[s.Job] {
			keep = append(keep, s)
		}
	}
	w.queue = keep
}

// take reads the record of job and queues its start, once per job.
func (w *startWatch) take(runDir, job string) {
	w.mu.Lock()
	if w.seen[job] {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	rec, err := catalog.ReadJobRecord(runDir, job)
	if err != nil || rec.Model == "" {
		return
	}
	if rec.Path != "" {
		// The job starts with the file: what prefetches fetched of it is
		// used, and it is no longer the first eviction takes. Noted now:
		// a short job's record is gone before the next eviction pass.
		entry := recordEntry(rec)
		w.a.prefetch.used(entry)
		w.a.noteUse(w.a.Config(), entry)
	}
	warm := rec.Fast && rec.Error == ""
	label := "cold"
	if warm {
		label = "warm"
	}
	w.a.metrics.jobStarts.WithLabelValues(label).Inc()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) > 4*maxPendingStarts {
		clear(w.seen)
	}
	w.seen[job] = true
	if len(w.queue) >= maxPendingStarts {
		w.queue = w.queue[1:]
	}
	w.queue = append(w.queue, api.JobStart{Job: rec.Job, Model: rec.Model, Warm: warm, Time: rec.Time})
	w.a.kick(kickReport)
}

// run watches runDir's job records until ctx ends. Without inotify (or
// with the directory impossible to make) it looks once a second.
func (w *startWatch) run(ctx context.Context, runDir string) {
	dir := catalog.JobsDir(runDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.a.log.WithError(err).Warn("job records directory cannot be made; job starts are not counted")
		return
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == nil {
		if _, err = unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		w.a.log.WithError(err).Info("no inotify on the job records directory; looking once a second")
		fd = -1
	} else {
		defer unix.Close(fd)
	}
	buf := make([]byte, 64<<10)
	for {
		if ctx.Err() != nil {
			return
		}
		if fd < 0 {
			w.scan(runDir, dir)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Wait on the descriptor itself, not a timer: a short job's
		// Epilog removes its record a few tens of milliseconds after the
		// Prolog wrote it, and the record must be read before that.
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 500); err != nil || n == 0 {
			continue
		}
		for {
			n, err := unix.Read(fd, buf)
			if n <= 0 || err != nil {
				break
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := ""
				if ev.Len > 0 {
					b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
					name = strings.TrimRight(string(b), "\x00")
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if job, ok := strings.CutSuffix(name, ".json"); ok && !strings.HasPrefix(name, ".") {
					w.take(runDir, job)
				}
			}
		}
	}
}

func (w *startWatch) scan(runDir, dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if job, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(e.Name(), ".") {
			w.take(runDir, filepath.Base(job))
		}
	}
}
