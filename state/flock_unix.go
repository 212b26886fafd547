//go:build unix

package state

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

var errWouldBlock = syscall.EWOULDBLOCK

// flock takes an flock(2) lock without waiting: exclusive, or shared.
// It fails with errWouldBlock when another open file holds a conflicting one.
func flock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err == syscall.EINTR {
			continue
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return errWouldBlock
		}
		if err != nil {
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		return nil
	}
}

func funlock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// processAlive reports whether pid names a live process: one that exists
// and is not a zombie waiting to be reaped.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill
	}
	// The state follows the command name, which is in parentheses and
	// may itself contain spaces or parentheses.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
