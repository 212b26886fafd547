package incushost

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// The init side (see init.go): started again as the lab's own executable
// with childEnv set, it is root in its user namespace and PID 1 of its
// PID namespace. It never returns to the program's main.
func init() {
	if os.Getenv(childEnv) == "1" {
		initMain()
	}
}

const ctrlFD = 3

func initMain() {
	spec, devnull, hostRoot := enterRoot()
	var mu sync.Mutex
	waiting := map[int]*os.File{} // pid -> reply socket
	go reap(&mu, waiting)         // PID 1 reaps every process, its commands' orphans too
	buf, oob := make([]byte, 4<<20), make([]byte, syscall.CmsgSpace(3*4))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(ctrlFD, buf, oob, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			os.Exit(0) // the lab is gone
		}
		msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
		if len(msgs) == 0 {
			continue
		}
		fds, _ := syscall.ParseUnixRights(&msgs[0])
		if len(fds) == 0 {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
		}
		var req ctrlRequest
		replyTo := os.NewFile(uintptr(fds[0]), "reply")
		err = json.Unmarshal(buf[:n], &req)
		switch {
		case err == nil && (req.Mount != nil || req.Unmount != ""):
			send(replyTo, hotplug(hostRoot, req))
			replyTo.Close()
		case err != nil || len(req.Command) == 0 || len(fds) != 3 && len(fds) != 4:
			send(replyTo, reply{Error: "bad exec request"})
			replyTo.Close()
		default:
			mu.Lock()
			start(req.execSpec, spec.NoSetGrps, devnull, fds, replyTo, waiting)
			mu.Unlock()
		}
		for _, fd := range fds[1:] {
			syscall.Close(fd)
		}
	}
}

// hotplug mounts or unmounts a disk device of the running container.
func hotplug(hostRoot int, req ctrlRequest) reply {
	var err error
	if req.Unmount != "" {
		err = sandbox.Unbind(req.Unmount)
	}
	if err == nil && req.Mount != nil {
		err = sandbox.HotBind(hostRoot, *req.Mount)
	}
	if err != nil {
		return reply{Error: err.Error()}
	}
	return reply{}
}

// enterRoot reads the spec, mounts the instance's file systems and
// chroots into it, then tells the lab it is ready; it returns the spec,
// /dev/null in the root and the host's / (for hotplug, from before the
// chroot). A failure is written to the lab and exits.
func enterRoot() (initSpec, int, int) {
	die := func(format string, args ...any) {
		_, _ = syscall.Write(ctrlFD, fmt.Appendf(nil, format, args...))
		os.Exit(1)
	}
	var spec initSpec
	if len(os.Args) < 2 || json.Unmarshal([]byte(os.Args[1]), &spec) != nil {
		die("incushost init: no spec")
	}
	if err := sandbox.Mount(spec.Root, spec.Binds); err != nil {
		die("the lab could not prepare the instance's mounts: %v", err)
	}
	hostRoot, err := sandbox.HostRoot()
	if err != nil {
		die("opening the host's root: %v", err)
	}
	if err := syscall.Chroot(spec.Root); err != nil {
		die("chroot: %v", err)
	}
	_ = syscall.Chdir("/")
	devnull, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		die("/dev/null: %v", err)
	}
	syscall.CloseOnExec(ctrlFD)
	_, _ = syscall.Write(ctrlFD, []byte("ready"))
	return spec, devnull, hostRoot
}

// reap waits for every process that ends and sends the exit code of a
// command to the one waiting for it.
func reap(mu *sync.Mutex, waiting map[int]*os.File) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		mu.Lock()
		if f := waiting[pid]; f != nil {
			code := ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			send(f, reply{Exit: &code})
			f.Close()
			delete(waiting, pid)
		}
		mu.Unlock()
	}
}

func send(f *os.File, r reply) {
	b, _ := json.Marshal(r)
	_, _ = f.Write(append(b, '\n'))
}

// start forks the command; the caller holds the lock the reaper takes,
// so that the reaper never sees a pid before it is waited for.
func start(req execSpec, noSetGroups bool, devnull int, fds []int, replyTo *os.File, waiting map[int]*os.File) {
	path := sandbox.LookPath(req.Command[0], req.Env)
	if path == "" {
		send(replyTo, reply{Error: "Command not found"})
		replyTo.Close()
		return
	}
	dir := req.Cwd
	if st, err := os.Stat(dir); dir == "" || err != nil || !st.IsDir() { // a missing cwd does not fail, as on the daemon
		dir = "/"
	}
	sys := &syscall.SysProcAttr{Setsid: true}
	stdin := devnull
	if len(fds) == 4 { // a stdin of the exec's: pipe or terminal
		stdin = fds[3]
		sys.Setctty, sys.Ctty = req.Tty, 0
	}
	if (req.UID != 0 || req.GID != 0) && noSetGroups {
		send(replyTo, reply{Error: fmt.Sprintf("the lab runs without root: its instances have only user and group 0 (asked for %d:%d)", req.UID, req.GID)})
		replyTo.Close()
		return
	}
	if req.UID != 0 || req.GID != 0 {
		sys.Credential = &syscall.Credential{Uid: req.UID, Gid: req.GID, Groups: []uint32{}}
	}
	pid, err := syscall.ForkExec(path, req.Command, &syscall.ProcAttr{Dir: dir, Env: req.Env,
		Files: []uintptr{uintptr(stdin), uintptr(fds[1]), uintptr(fds[2])}, Sys: sys})
	if err != nil {
		send(replyTo, reply{Error: fmt.Sprintf("Failed to run %s: %v", req.Command[0], err)})
		replyTo.Close()
		return
	}
	waiting[pid] = replyTo
	send(replyTo, reply{PID: pid})
}
