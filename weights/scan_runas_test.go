package weights

import (
	"os/exec"
	"syscall"
)

// scanRunAs runs a program as nobody (uid and gid 65534) and returns its
// combined output.
func scanRunAs(exe string, args, env []string) ([]byte, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.CombinedOutput()
}
