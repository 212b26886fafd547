//go:build linux

package plugin

import "syscall"

func init() {
	procAttr = func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
}
