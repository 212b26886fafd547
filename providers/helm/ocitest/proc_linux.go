package ocitest

import (
	"os/exec"
	"syscall"
)

// dieWithParent: a registry never outlives a test binary that was killed.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
