//go:build unix && !linux

package local

import (
	"errors"
	"os"
	"syscall"
	"time"
)

const waitDelay = 5 * time.Second

// sysProcAttr puts the command in its own process group; there is no
// parent-death signal outside Linux, so commands are not fail-stop here.
func sysProcAttr(bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func killAll(p *os.Process, _ bool) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func reapGroup(int) {}
