//go:build linux

package local

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
// either. Commands enter the namespace by being forked from threads that
// joined it with setns, so each costs a plain fork and exec; there are
// several, so that a level of parallel steps does not queue behind one
// thread's fork-and-exec (~0.3 ms each).
type runNamespace struct {
	init *exec.Cmd
	reqs chan startReq
	dead atomic.Bool
}

type startReq struct {
	cmd  *exec.Cmd
	done chan error
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
	ns := &runNamespace{init: cmd, reqs: make(chan startReq)}
	go func() {
		cmd.Wait()
		ns.dead.Store(true)
	}()
	fd, err := syscall.Open(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		ns.close()
		return nil, err
	}
	defer syscall.Close(fd)
	ready := make(chan error, spawners)
	for range spawners {
		go ns.spawner(fd, ready)
	}
	var firstErr error
	for range spawners {
		if err := <-ready; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		ns.close()
		return nil, firstErr
	}
	return ns, nil
}

// spawners is how many threads fork commands into a namespace.
const spawners = 4

// spawner forks commands from an OS thread that joined the namespace. The
// thread stays locked: it is a door into the namespace, and it ends with
// the goroutine.
func (ns *runNamespace) spawner(fd int, ready chan<- error) {
	runtime.LockOSThread()
	err := unix.Setns(fd, unix.CLONE_NEWPID)
	if err != nil {
		ready <- os.NewSyscallError("setns", err)
		return
	}
	ready <- nil
	for r := range ns.reqs {
		r.done <- r.cmd.Start()
	}
}

// start starts cmd inside the namespace.
func (ns *runNamespace) start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	ns.reqs <- startReq{cmd: cmd, done: done}
	return <-done
}

// close ends the namespace and everything still in it.
func (ns *runNamespace) close() {
	close(ns.reqs)
	if ns.init.Process != nil {
		ns.init.Process.Kill()
	}
}
