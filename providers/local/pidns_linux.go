//go:build linux

package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// runNamespace is the PID namespace every command of a provider runs in.
// Its first process is a small shell that only holds the namespace: when
// migrate dies, even by SIGKILL, the kernel kills that shell (parent-death
// signal) and with it every process in the namespace — a command forked an
// instant before included. The shell passes a gate first (gateScript), so
// a migrate killed before the death signal was armed leaves nothing behind
// either. A command enters the namespace by being forked from a thread
// that joined it with setns for that one fork and then came back, so it
// costs a plain fork and exec on the caller's own thread.
type runNamespace struct {
	init *exec.Cmd
	fd   int // the namespace, open while it lives
	home int // migrate's own PID namespace, to come back to
	dead atomic.Bool
	// mu: close waits for starts in progress (their setns uses the fds).
	mu     sync.RWMutex
	closed bool
}

// nsInitScript holds the namespace open; it never reaps (commands are
// migrate's children, and migrate reaps them).
const nsInitScript = gateScript + `; while :; do sleep 3600 & wait $!; done`

func newRunNamespace() (*runNamespace, error) {
	cmd := exec.Command("/bin/sh", "-c", nsInitScript, "migrate-pidns", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	g := gated(cmd)
	if g == nil {
		return nil, fmt.Errorf("no /bin/sh to hold a PID namespace")
	}
	// gated rewrote the command to run "$@" after the gate; the init
	// script carries its own loop, so "$@" is never reached.
	cmd.Args = []string{"sh", "-c", nsInitScript}
	if err := cmd.Start(); err != nil {
		g.abort()
		return nil, err
	}
	g.open()
	ns := &runNamespace{init: cmd}
	go func() {
		cmd.Wait()
		ns.dead.Store(true)
	}()
	ns.fd, ns.home = -1, -1
	fd, err := syscall.Open(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		ns.close()
		return nil, err
	}
	ns.fd = fd
	home, err := syscall.Open("/proc/self/ns/pid", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		ns.close()
		return nil, err
	}
	ns.home = home
	return ns, nil
}

// start starts cmd inside the namespace: this goroutine's thread joins it
// for the fork (setns changes where a thread's children go, not the
// thread itself), then returns home. A thread that could not return stays
// locked to this goroutine, so no other goroutine forks from it.
func (ns *runNamespace) start(cmd *exec.Cmd) error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.closed {
		return errors.New("the command namespace is closed")
	}
	runtime.LockOSThread()
	if err := unix.Setns(ns.fd, unix.CLONE_NEWPID); err != nil {
		runtime.UnlockOSThread()
		return os.NewSyscallError("setns", err)
	}
	err := cmd.Start()
	if herr := unix.Setns(ns.home, unix.CLONE_NEWPID); herr != nil {
		return errors.Join(err, os.NewSyscallError("setns back", herr))
	}
	runtime.UnlockOSThread()
	return err
}

// close ends the namespace and everything still in it.
func (ns *runNamespace) close() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed {
		return
	}
	ns.closed = true
	for _, fd := range []int{ns.fd, ns.home} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	if ns.init.Process != nil {
		ns.init.Process.Kill()
	}
}
