package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Namespaces: the process is root in a new user namespace (the same IDs
// as the lab's when it runs as root; only its own user otherwise), with
// mounts and PIDs of its own, killed when its parent dies.
func Namespaces() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}}
		a.GidMappingsEnableSetgroups = true
	} else {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return a
}

// LookPath finds a command in the (new) root as a shell would, by the
// PATH of env (a default one when env has none); "" when not found.
func LookPath(name string, env []string) string {
	executable := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
	}
	if strings.Contains(name, "/") {
		if executable(name) {
			return name
		}
		return ""
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if p := filepath.Join(d, name); executable(p) {
			return p
		}
	}
	return ""
}

// Spec is one command to run in a root.
type Spec struct {
	Root  string   `json:"root"`  // the host directory that becomes /
	Binds []Bind   `json:"binds"` // mounted after the host's directories
	Argv  []string `json:"argv"`  // argv[0] looked up in the root's PATH (Env's)
	Env   []string `json:"env"`   // the command's whole environment
	Dir   string   `json:"dir"`   // its working directory inside the root; "" for /
}

// marker, set in the environment of the re-executed program, makes its
// init hook run the command instead of the program.
const marker = "MIGRATE_SANDBOX_SPEC"

// NotFound is the exit code when the command is not in the root (as a
// shell's).
const NotFound = 127

// Command runs spec in a fresh user, mount and PID namespace: the running
// program (/proc/self/exe) started again, whose init hook mounts, chroots
// into spec.Root, changes to spec.Dir and execs the command. Set the
// returned command's Stdout and Stderr; ctx kills it. Setup errors
// (a bind's missing source, a command not found) go to its stderr and
// make it exit 127.
func Command(ctx context.Context, spec Spec) *exec.Cmd {
	b, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Env = []string{marker + "=" + string(b)}
	cmd.SysProcAttr = Namespaces()
	return cmd
}

func init() {
	if s, ok := os.LookupEnv(marker); ok {
		runSpec(s)
	}
}

// runSpec is the sandboxed side: it never returns.
func runSpec(s string) {
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "sandbox: "+format+"\n", args...)
		os.Exit(NotFound)
	}
	var spec Spec
	if err := json.Unmarshal([]byte(s), &spec); err != nil || len(spec.Argv) == 0 || spec.Root == "" {
		die("no command to run (bad spec)")
	}
	if err := Mount(spec.Root, spec.Binds); err != nil {
		die("preparing the mounts: %v", err)
	}
	if err := syscall.Chroot(spec.Root); err != nil {
		die("chroot %s: %v", spec.Root, err)
	}
	dir := spec.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // as a container runtime does for workingDir
		die("working directory %s: %v", dir, err)
	}
	if err := syscall.Chdir(dir); err != nil {
		die("working directory %s: %v", dir, err)
	}
	path := LookPath(spec.Argv[0], spec.Env)
	if path == "" {
		die("%s: command not found in the root (the host's /usr, /bin, /sbin and the root's own files)", spec.Argv[0])
	}
	// Root here is root in its user namespace only; without these two it
	// could remount the host's directories writable or leave the chroot.
	for _, capability := range []uintptr{capSysAdmin, capSysChroot} {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, capability, 0); e != 0 {
			die("dropping capability %d: %v", capability, e)
		}
	}
	err := syscall.Exec(path, spec.Argv, spec.Env)
	die("exec %s: %v", spec.Argv[0], err)
}

const (
	prCapbsetDrop = 24 // PR_CAPBSET_DROP
	capSysChroot  = 18 // CAP_SYS_CHROOT
	capSysAdmin   = 21 // CAP_SYS_ADMIN
)
