// Package mungetest runs real munged daemons for tests: one per simulated
// host, all with one key, each on its own socket and with its own origin
// address, so a test can tell hosts apart by the credentials they make.
package mungetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api/munge"
)

// Realm is one munge key and the daemons started with it.
type Realm struct {
	t    testing.TB
	dir  string
	key  string
	uid  uint32
	gid  uint32
	next int
	pids map[string]int // munged's pid by socket
}

// New makes a key in a fresh directory. It skips the test when munged or
// the munge user is missing, or when not root (munged runs as munge).
func New(t testing.TB) *Realm {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: munged runs as the munge user")
	}
	if _, err := exec.LookPath("munged"); err != nil {
		if _, err := os.Stat("/usr/sbin/munged"); err != nil {
			t.Skip("munged is not installed (apt-get install munge)")
		}
	}
	u, err := user.Lookup("munge")
	if err != nil {
		t.Skipf("no munge user: %v (apt-get install munge)", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	// Not t.TempDir: munged, running as munge, must reach its socket, and
	// every directory above it must be searchable by others (o+x).
	dir, err := os.MkdirTemp("/var/tmp", "llmgw-munge-test.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Realm{t: t, dir: dir, key: filepath.Join(dir, "munge.key"), uid: uint32(uid), gid: uint32(gid), pids: map[string]int{}}
	key := make([]byte, 1024)
	rand.Read(key)
	if err := os.WriteFile(r.key, key, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(r.key, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	return r
}

// Start runs one munged whose credentials carry origin (an address such as
// 127.0.0.2) and returns a codec on its socket. It is stopped when the test
// ends.
func (r *Realm) Start(origin string) munge.Codec {
	t := r.t
	t.Helper()
	r.next++
	d := filepath.Join(r.dir, strconv.Itoa(r.next))
	if err := os.Mkdir(d, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, int(r.uid), int(r.gid)); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(d, "munge.socket")
	cmd := exec.Command(munged(), "--foreground", "--socket="+sock, "--key-file="+r.key,
		"--log-file="+filepath.Join(d, "munged.log"), "--pid-file="+filepath.Join(d, "munged.pid"),
		"--seed-file="+filepath.Join(d, "munged.seed"), "--origin="+origin, "--num-threads=2")
	// Pdeathsig: a test binary killed by its timeout (or by hand) runs no
	// Cleanup, and a munged left behind keeps whatever descriptors it
	// inherited, a lock serialising the dev cluster's users among them,
	// for ever. Go sets it after the credentials change, which would
	// otherwise clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: r.uid, Gid: r.gid}, Pdeathsig: syscall.SIGTERM}
	cmd.Dir = d
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting munged: %v", err)
	}
	r.pids[sock] = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	// Ready once the socket answers connections; munged creates it last.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(d, "munged.log"))
			t.Fatalf("munged exited at start (%v); its log:\n%s", err, log)
		default:
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("munged's socket %s did not answer within 10 s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return munge.New(sock)
}

func munged() string {
	if p, err := exec.LookPath("munged"); err == nil {
		return p
	}
	return "/usr/sbin/munged"
}

// EncodeAs makes a credential as uid:gid by running the munge program as
// that user against codec's socket: what a user on that host could send.
func EncodeAs(t testing.TB, codec munge.Codec, uid, gid uint32, payload []byte) string {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), "munge", "--socket="+codec.Socket())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("munge as uid %d: %v: %s", uid, err, stderr.String())
	}
	return string(bytes.TrimSpace(out))
}

// CPU is the CPU time the munged behind codec has used: what decoding
// costs on the host, beside the caller's own share.
func (r *Realm) CPU(codec munge.Codec) time.Duration {
	r.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pids[codec.Socket()]))
	if err != nil {
		r.t.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
