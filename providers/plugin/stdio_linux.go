//go:build linux

package plugin

import (
	"os"

	"golang.org/x/sys/unix"
)

// protocolOutput takes the process's standard output for the protocol and
// points file descriptor 1 at standard error, so that a library printing
// to stdout (a warning, a progress line) lands in the log instead of in
// the middle of a message.
func protocolOutput() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, os.NewSyscallError("dup", err)
	}
	if err := unix.Dup3(2, 1, 0); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("dup3", err)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "migrate-plugin-protocol"), nil
}
