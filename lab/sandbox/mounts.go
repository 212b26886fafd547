package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// HostDirs are bind-mounted read-only into a root that lacks them, so
// that ordinary commands (sh, tar, cp) exist in any root; a host symlink
// (/bin -> usr/bin on a merged-/usr system) becomes the same symlink in
// the root.
var HostDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"}

// Devices are the harmless nodes of /dev bound into a root.
var Devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// Bind is a host path (a directory or a file) mounted at Path in the root.
// With Upper set it is an overlay instead: Source read-only below, the
// directory Upper above taking every change (Work: overlayfs's work
// directory, on Upper's file system), as an image's shared layer under
// a container's own files.
type Bind struct {
	Source   string `json:"source"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readonly"`
	Upper    string `json:"upper,omitempty"`
	Work     string `json:"work,omitempty"`
}

// Mount prepares root in the caller's own mount namespace (see
// Namespaces): the host's command directories read-only, /dev's
// harmless nodes, the binds, /proc. Never call it in the lab's own
// namespace: the mounts would be the host's.
func Mount(root string, binds []Bind) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	layered := map[string]bool{} // the root's own /usr: no host directory there
	for _, b := range binds {
		if b.Upper != "" {
			if err := mountOverlay(root, b); err != nil {
				return err
			}
			layered[filepath.Clean(b.Path)] = true
		}
	}
	for _, d := range HostDirs {
		if layered[d] {
			continue
		}
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		in := filepath.Join(root, d)
		if fi.Mode()&os.ModeSymlink != 0 {
			if _, err := os.Lstat(in); os.IsNotExist(err) {
				target, _ := os.Readlink(d)
				_ = os.Symlink(target, in)
			}
			continue
		}
		if err := bindHostDir(d, in); err != nil {
			return err
		}
	}
	dev := filepath.Join(root, "dev")
	_ = os.MkdirAll(dev, 0o755)
	for _, n := range Devices {
		p := filepath.Join(dev, n)
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			if f, err := os.Create(p); err == nil {
				f.Close()
			}
		}
		_ = syscall.Mount("/dev/"+n, p, "", syscall.MS_BIND, "")
	}
	for _, b := range binds { // as the daemon binds a container's disk devices
		if b.Upper != "" {
			continue
		}
		if err := bindDevice(root, b); err != nil {
			return err
		}
	}
	proc := filepath.Join(root, "proc")
	if _, err := os.Stat(proc); err == nil {
		_ = syscall.Mount("proc", proc, "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	}
	return nil
}

// bindHostDir mounts a host directory read-only where the rootfs has no
// such directory or an empty one; inside /usr it goes one level down, so
// that the rootfs's own /usr/local stays.
func bindHostDir(host, in string) error {
	fi, err := os.Lstat(in)
	switch {
	case os.IsNotExist(err):
		if err := os.MkdirAll(in, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return nil // the rootfs's own file or symlink wins
	default:
		ents, _ := os.ReadDir(in)
		if len(ents) > 0 {
			if host != "/usr" {
				return nil
			}
			subs, _ := os.ReadDir(host)
			for _, e := range subs {
				if e.IsDir() && e.Name() != "local" {
					if err := bindHostDir(filepath.Join(host, e.Name()), filepath.Join(in, e.Name())); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	if err := syscall.Mount(host, in, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s: %w", host, err)
	}
	// Read-only, keeping the flags the source mount has locked.
	var st syscall.Statfs_t
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
	if syscall.Statfs(host, &st) == nil {
		for _, f := range []uintptr{syscall.MS_NOSUID, syscall.MS_NODEV, syscall.MS_NOEXEC, syscall.MS_NOATIME, syscall.MS_NODIRATIME, syscall.MS_RELATIME} {
			if uintptr(st.Flags)&stFlag(f) != 0 {
				flags |= f
			}
		}
	}
	if err := syscall.Mount("", in, "", flags, ""); err != nil {
		// Never leave the host's directory writable to the command.
		return fmt.Errorf("making %s read-only: %w", host, err)
	}
	return nil
}

// stFlag maps an MS_ flag to statfs's ST_ flag.
func stFlag(ms uintptr) uintptr {
	switch ms {
	case syscall.MS_RELATIME:
		return 4096 // ST_RELATIME
	default: // ST_NOSUID..ST_NODIRATIME have the MS_ values
		return ms
	}
}

func bindDevice(root string, b Bind) error { return bindFrom(root, b.Source, b) }

// bindFrom mounts source (b.Source as the caller reaches it) at b.Path in
// root, making the mount point as the daemon does.
func bindFrom(root, source string, b Bind) error {
	st, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("Missing source path %q", b.Source)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	rel := filepath.Clean(b.Path)[1:]
	if st.IsDir() {
		err = r.MkdirAll(rel, 0o755)
	} else if _, serr := r.Stat(rel); serr != nil {
		err = r.WriteFile(rel, nil, 0o644)
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", b.Path, err)
	}
	// In the caller's own mount namespace: a symlink in the path can only
	// misplace the mount there, never on the host.
	target := filepath.Join(root, rel)
	if err := syscall.Mount(source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at %s: %w", b.Source, b.Path, err)
	}
	if b.ReadOnly {
		return syscall.Mount("", target, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY, "")
	}
	return nil
}

// mountOverlay mounts b's layers at b.Path in root (made when absent).
func mountOverlay(root string, b Bind) error {
	target := filepath.Join(root, filepath.Clean("/"+b.Path))
	for _, d := range []string{target, b.Upper, b.Work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("overlay at %s: %w", b.Path, err)
		}
	}
	opts := "lowerdir=" + b.Source + ",upperdir=" + b.Upper + ",workdir=" + b.Work
	if err := syscall.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay of %s at %s: %w", b.Source, b.Path, err)
	}
	return nil
}
