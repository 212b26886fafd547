//go:build unix && !linux

package local

import (
	"errors"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

const waitDelay = 5 * time.Second

// killGroup kills the command's process group; there is no parent-death
// signal outside Linux, so commands are not fail-stop here.
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func reapGroup(int) {}

// runNamespace exists only on Linux.
type runNamespace struct{ dead atomic.Bool }

func newRunNamespace() (*runNamespace, error)   { return nil, errors.ErrUnsupported }
func (*runNamespace) start(cmd *exec.Cmd) error { return cmd.Start() }
func (*runNamespace) close()                    {}

func setDeathSignal(*syscall.SysProcAttr) {}
