package api

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// The agent's socket is trusted by root: the Prolog asks it to make weights
// present and points the job at the path it answers. So before a hook
// speaks to it, the socket must be one only root (or the caller itself, for
// a test or a user's own agent) could have put there, and the process
// serving it must be root (or the caller). Without these, in a directory
// such as a 1777 /tmp, any user could bind the socket first and answer the
// root hooks with a path of their choosing.

// CheckSocketDir says why the directory holding sock cannot be trusted, or
// nil: it must be a real directory (not a symlink), owned by root or by this
// process's user, and writable by nobody else. The agent checks it before
// binding (a socket in such a directory can be replaced under it), and the
// hooks before connecting.
func CheckSocketDir(sock string) error {
	dir := filepath.Dir(sock)
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("socket directory %s is not a directory (a symlink?); give the agent's socket a directory of its own such as /run/llmgw", dir)
	case !ok:
		return fmt.Errorf("socket directory %s: no owner information", dir)
	case !trustedUID(st.Uid):
		return fmt.Errorf("socket directory %s is owned by uid %d, not root; anyone who owns it can replace the socket: chown root %s", dir, st.Uid, dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("socket directory %s is writable by group or others (mode %04o); anyone could put a socket there for the hooks to trust: chmod 755 %s, or give the socket a directory of its own such as /run/llmgw", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// trustedUID is root, or this process's own user (a process trusts itself:
// the agent and a hook run by the same user in a test, or a user's own
// agent).
func trustedUID(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid()
}

// PeerUID returns the user id of the process at the other end of a unix
// socket connection, from the kernel (SO_PEERCRED): for a listening socket
// the user that called listen, which no client can forge.
func PeerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}

// dialAgent connects to the agent's socket after checking its directory,
// and keeps the connection only if root (or this process's user) serves it.
// A refusal is a dial error, so callers treat it as no agent (ErrNoAgent):
// the hook then fetches in its own process, as root, and the squatter
// gets nothing.
func dialAgent(ctx context.Context, sock string) (net.Conn, error) {
	refuse := func(err error) error {
		return &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: sock, Net: "unix"},
			Err: fmt.Errorf("refusing the agent socket: %w", err)}
	}
	if err := CheckSocketDir(sock); err != nil {
		return nil, refuse(err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	uid, err := PeerUID(c)
	if err == nil && !trustedUID(uid) {
		err = fmt.Errorf("%s is served by uid %d, not root; something other than the agent bound it (check who can write %s)", sock, uid, filepath.Dir(sock))
	}
	if err != nil {
		c.Close()
		return nil, refuse(err)
	}
	return c, nil
}
