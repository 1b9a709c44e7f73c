package scan

import (
	"os/exec"
	"syscall"
)

// runAs runs a program as nobody (uid and gid 65534) and returns its
// combined output.
func runAs(exe string, args, env []string) ([]byte, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return cmd.CombinedOutput()
}
