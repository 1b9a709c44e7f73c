// Package fusetest mounts a real FUSE filesystem (Debian's bindfs) for
// tests, and makes it stop answering as a dead filer does: its daemon is
// stopped with SIGSTOP, and every lookup below the mount then blocks in
// the kernel. Tests that use it need root and bindfs (apt-get install
// bindfs fuse3); Need skips them otherwise.
package fusetest

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// superMagic is FUSE's statfs f_type (FUSE_SUPER_MAGIC).
const superMagic = 0x65735546

// Need skips the test unless it can mount FUSE with bindfs.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := exec.LookPath("bindfs"); err != nil {
		t.Skip("bindfs not installed: apt-get install bindfs fuse3")
	}
}

// Mount mounts src on mnt with bindfs in the foreground, so the test holds
// its process (to stop it), and returns once the mount answers. When the
// test ends, whatever happened, the daemon is continued and the mount
// removed. opts are bindfs's -o options: Uncached, or "ro" for a filer
// mounted read-only.
func Mount(t testing.TB, src, mnt string, opts ...string) *os.Process {
	t.Helper()
	args := []string{"-f"}
	for _, o := range opts {
		args = append(args, "-o", o)
	}
	cmd := exec.Command("bindfs", append(args, src, mnt)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("bindfs %s %s: %v", src, mnt, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		if err := exec.Command("fusermount", "-u", mnt).Run(); err != nil {
			exec.Command("umount", "-l", mnt).Run()
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err == nil && st.Type == superMagic {
			return cmd.Process
		}
		if time.Now().After(deadline) {
			t.Fatalf("bindfs %s %s: not mounted after 10s", src, mnt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Uncached are the FUSE options that send every lookup and attribute
// read to the daemon, as a filer without client caching does: with the
// kernel's default caches a stat answered from the cache never meets a
// slow or stopped daemon.
var Uncached = []string{"attr_timeout=0", "entry_timeout=0", "negative_timeout=0"}

// Slow makes the mount's daemon answer each operation about delay late, as
// a slow filer does: it is stopped for delay, continued for a moment,
// stopped again, until the test ends. An operation that arrives while it
// is stopped waits for the next moment it runs.
func Slow(t testing.TB, p *os.Process, delay time.Duration) {
	t.Helper()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			p.Signal(syscall.SIGSTOP)
			select {
			case <-done:
				p.Signal(syscall.SIGCONT)
				return
			case <-time.After(delay):
			}
			p.Signal(syscall.SIGCONT)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// Stop stops the mount's daemon: from then on it answers nothing, until
// the test's cleanup continues it.
func Stop(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}
