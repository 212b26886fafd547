//go:build linux

package local

import (
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// waitDelay bounds how long Wait waits for output pipes held open by a
// process that escaped the step (one that put itself in another session
// and kept the pipe), once the command itself has exited.
const waitDelay = 5 * time.Second

// sysProcAttr makes a command fail-stop. With pidns it is PID 1 of a new
// PID namespace: when it exits or is killed, the kernel kills every process
// left in the namespace, and Pdeathsig kills it when migrate dies, even by
// SIGKILL. Without, it leads its own process group and only it gets the
// parent-death signal. Either way it is in its own process group, so the
// terminal's Ctrl-C reaches migrate alone and migrate decides.
func sysProcAttr(pidns bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if pidns {
		a.Cloneflags = syscall.CLONE_NEWPID
	}
	return a
}

// killAll kills a command and everything it started: the namespace's init
// takes the namespace with it; otherwise the whole process group is killed.
func killAll(p *os.Process, pidns bool) error {
	if pidns {
		err := p.Kill()
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return err
	}
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// reapGroup is for commands without a PID namespace: it waits for the
// group leader to exit without reaping it, so its pid (the group's id)
// cannot be reused yet, then kills what is left of its group, as the
// kernel does for a namespace.
func reapGroup(pid int) {
	const (
		pPID    = 1
		wExited = 4
		wNowait = 0x1000000
	)
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])), wExited|wNowait, 0, 0)
		if e != syscall.EINTR {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
