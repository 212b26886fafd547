package incushost

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// initProc is a running instance's init: the lab's executable started
// again (childEnv set, see child.go) in new user, mount and PID
// namespaces, where it mounted what commands need, chrooted into the
// rootfs and waits for commands to start. Every command of the instance
// is its child, so they see each other in /proc, and killing it (a stop)
// kills them all.
type initProc struct {
	cmd  *exec.Cmd
	ctrl *os.File // SOCK_SEQPACKET: one request (and its fds) per message
	mu   sync.Mutex
	done chan struct{}
}

// initSpec is what the init is told, as JSON in its argv.
type initSpec struct {
	Root      string         `json:"root"`
	NoSetGrps bool           `json:"no_setgroups"`
	Binds     []sandbox.Bind `json:"binds"`
}

// binds are the disk devices of a container that mount a directory: a
// host path, or a filesystem custom volume's directory (made when
// missing); the caller holds s.mu.
func (s *Server) binds(devs map[string]map[string]string) []sandbox.Bind {
	var out []sandbox.Bind
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		if b, ok := s.bindOf(devs[name]); ok {
			out = append(out, b)
		}
	}
	return out
}

// bindOf is the mount a disk device makes in a container, if any.
func (s *Server) bindOf(d map[string]string) (sandbox.Bind, bool) {
	if d["type"] != "disk" || !strings.HasPrefix(d["path"], "/") || d["path"] == "/" {
		return sandbox.Bind{}, false
	}
	b := sandbox.Bind{Source: d["source"], Path: d["path"], ReadOnly: d["readonly"] == "true"}
	if strings.HasPrefix(b.Source, "/") {
		return b, true
	}
	v := s.volumes[orStr(d["pool"], s.defaultPool())+"/"+b.Source]
	if !isVolumeSource(b.Source) || v == nil || v.ContentType != "filesystem" {
		return sandbox.Bind{}, false
	}
	b.Source = s.volDir(v.Pool, v.Name)
	_ = os.MkdirAll(b.Source, 0o755)
	return b, true
}

// execSpec is one command, sent to the init with its reply socket,
// stdout and stderr.
type execSpec struct {
	Command []string `json:"command"`
	Env     []string `json:"env"`
	Cwd     string   `json:"cwd"`
	UID     uint32   `json:"uid"`
	GID     uint32   `json:"gid"`
	// Tty: the command's stdin (sent as a fourth descriptor) is a
	// terminal, to be its controlling one.
	Tty bool `json:"tty,omitempty"`
}

// ctrlRequest is one message to the init: a command to start (with its
// reply socket, stdout and stderr), or a disk to mount or unmount in the
// running container (with its reply socket only).
type ctrlRequest struct {
	execSpec
	Mount   *sandbox.Bind `json:"mount,omitempty"`
	Unmount string        `json:"unmount,omitempty"` // done before Mount when both are set
}

// reply is one line from the init about a command (or a hotplug: its
// error, if any).
type reply struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	Exit  *int   `json:"exit,omitempty"`
}

const childEnv = "MIGRATE_INCUSHOST_CHILD"

func startInit(in *instance, binds []sandbox.Bind) (*initProc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ctrl, theirs := os.NewFile(uintptr(fds[0]), "init-ctrl"), os.NewFile(uintptr(fds[1]), "init-ctrl")
	defer theirs.Close()
	self, err := os.Executable()
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	b, _ := json.Marshal(initSpec{Root: in.rootfs(), NoSetGrps: os.Geteuid() != 0, Binds: binds})
	cmd := exec.Command(self, string(b))
	cmd.Env = []string{childEnv + "=1"}
	cmd.ExtraFiles = []*os.File{theirs}
	if log, err := os.OpenFile(filepath.Join(in.dir, "logs", "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		cmd.Stdout, cmd.Stderr = log, log
		defer log.Close()
	}
	cmd.SysProcAttr = sandbox.Namespaces()
	if err := cmd.Start(); err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("starting the instance's init in new namespaces: %w", err)
	}
	theirs.Close()
	p := &initProc{cmd: cmd, ctrl: ctrl, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	buf := make([]byte, 4096)
	n, err := ctrl.Read(buf)
	if err != nil || string(buf[:n]) != "ready" {
		p.kill()
		msg := string(buf[:max(n, 0)])
		if err != nil {
			msg = err.Error()
		}
		return nil, fmt.Errorf("the instance's init did not start: %s", msg)
	}
	return p, nil
}

// kill ends the init and every command of the instance.
func (p *initProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
	p.ctrl.Close()
}

// running is a started command: its reply socket says when it ends.
type running struct {
	r *bufio.Reader
	f *os.File
}

// exec starts a command through the init; the error is the daemon's
// wording when the program does not exist ("Command not found").
func (p *initProc) exec(spec execSpec, stdout, stderr *os.File) (*running, error) {
	return p.execWith(spec, nil, stdout, stderr)
}

// execWith is exec with a stdin of the caller's (nil: /dev/null).
func (p *initProc) execWith(spec execSpec, stdin, stdout, stderr *os.File) (*running, error) {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	mine := os.NewFile(uintptr(pair[0]), "exec-reply")
	b, _ := json.Marshal(spec)
	p.mu.Lock()
	fds := []int{pair[1], int(stdout.Fd()), int(stderr.Fd())}
	if stdin != nil {
		fds = append(fds, int(stdin.Fd()))
	}
	err = syscall.Sendmsg(int(p.ctrl.Fd()), b, syscall.UnixRights(fds...), nil, 0)
	p.mu.Unlock()
	syscall.Close(pair[1])
	if err != nil {
		mine.Close()
		return nil, fmt.Errorf("the instance's init is gone: %w", err)
	}
	r := &running{r: bufio.NewReader(mine), f: mine}
	first, err := r.next()
	switch {
	case err != nil:
		mine.Close()
		return nil, errors.New("the instance stopped while the command started")
	case first.Error != "":
		mine.Close()
		return nil, errf(http.StatusBadRequest, "%s", first.Error)
	}
	return r, nil
}

func (r *running) next() (reply, error) {
	var rep reply
	line, err := r.r.ReadBytes('\n')
	if err != nil {
		return rep, err
	}
	return rep, json.Unmarshal(line, &rep)
}

// wait returns the command's exit code; 137 (SIGKILL) when its instance
// stopped under it.
func (r *running) wait() int {
	defer r.f.Close()
	rep, err := r.next()
	if err != nil || rep.Exit == nil {
		return 128 + int(syscall.SIGKILL)
	}
	return *rep.Exit
}

// hotplug asks the init to unmount what is at unmount ("" for nothing)
// and then mount b (nil for nothing) in the running container.
func (p *initProc) hotplug(unmount string, b *sandbox.Bind) error {
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mine := os.NewFile(uintptr(pair[0]), "hotplug-reply")
	defer mine.Close()
	msg, _ := json.Marshal(ctrlRequest{Mount: b, Unmount: unmount})
	p.mu.Lock()
	err = syscall.Sendmsg(int(p.ctrl.Fd()), msg, syscall.UnixRights(pair[1]), nil, 0)
	p.mu.Unlock()
	syscall.Close(pair[1])
	if err != nil {
		return fmt.Errorf("the instance's init is gone: %w", err)
	}
	rep, err := (&running{r: bufio.NewReader(mine), f: mine}).next()
	switch {
	case err != nil:
		return errors.New("the instance stopped during the hotplug")
	case rep.Error != "":
		return errors.New(rep.Error)
	}
	return nil
}
