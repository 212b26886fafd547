package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// A disk device added to a running container is mounted at once, as the
// daemon hotplugs it, by the process that chrooted into the root (a
// container's init): the host's paths are out of its sight then, so it
// keeps a directory fd of the host's / from before the chroot (HostRoot)
// and reaches a bind's source through it.

// HostRoot opens the host's / for HotBind; call it before the chroot. The
// fd is close-on-exec: the commands started in the root never get it.
func HostRoot() (int, error) {
	return syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// HotBind mounts b into the root the caller has chrooted into, b.Source
// being a host path reached through hostRoot (from HostRoot). It changes
// the working directory for the while: call it from the one goroutine
// that forks the root's commands.
func HotBind(hostRoot int, b Bind) error {
	if err := syscall.Fchdir(hostRoot); err != nil {
		return fmt.Errorf("reaching the host's files: %w", err)
	}
	defer func() { _ = syscall.Chdir("/") }()
	return bindFrom("/", "."+filepath.Clean("/"+b.Source), b)
}

// Unbind unmounts what is mounted at path in the caller's root (a device
// removed from a running container) and removes the mount point when it
// is an empty directory, as the daemon does.
func Unbind(path string) error {
	target := filepath.Clean("/" + path)
	if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("unmounting %s: %w", target, err)
	}
	if st, err := os.Lstat(target); err == nil && st.IsDir() {
		_ = os.Remove(target) // fails, and stays, when not empty
	}
	return nil
}
