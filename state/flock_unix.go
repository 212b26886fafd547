//go:build unix

package state

import (
	"errors"
	"os"
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
