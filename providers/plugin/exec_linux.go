//go:build linux

package plugin

import (
	"os"
	"os/exec"
)

// command runs the open file itself, through /proc/self/fd: what runs is
// what was hashed, even if the path is given another file meanwhile. The
// file is the child's descriptor 3 (ExtraFiles), which the program keeps,
// read-only: its own content.
func (f *Found) command(args ...string) *exec.Cmd {
	return &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       append([]string{f.Path}, args...),
		ExtraFiles: []*os.File{f.file},
	}
}
