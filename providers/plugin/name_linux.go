//go:build linux

package plugin

import (
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nameProcess gives the program its own name back in ps and top: run
// through /proc/self/fd (exec_linux.go), the kernel names it "3". The
// name is argv[0]'s, which the host sets to the program's path.
func nameProcess() {
	name, err := unix.BytePtrFromString(filepath.Base(os.Args[0]))
	if err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
}
