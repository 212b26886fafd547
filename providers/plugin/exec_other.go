//go:build !linux

package plugin

import "os/exec"

// command runs the program by its path: without /proc/self/fd the check
// and the run are two looks at the file (see Find for why others cannot
// replace it in between: neither it nor its directory is theirs to write).
func (f *Found) command(args ...string) *exec.Cmd {
	cmd := exec.Command(f.Path, args...)
	return cmd
}
