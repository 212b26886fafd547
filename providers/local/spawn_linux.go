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

// killGroup kills a command and everything it started in its process
// group.
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// reapGroup waits for a group leader to exit without reaping it, so its
// pid (the group's id) cannot be reused yet, then kills what is left of
// its group.
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

// setDeathSignal has the kernel kill the command when migrate dies (for
// commands outside a PID namespace, where Go's own check after arming it
// also catches a migrate that died first).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
