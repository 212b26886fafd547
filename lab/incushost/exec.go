package incushost

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"time"
)

// A command runs in the instance's rootfs as a child of this process in
// new user, mount and PID namespaces: the lab's executable is started
// again (childEnv set, see child.go), makes its mounts, chroots into the
// rootfs and execs the command, which is PID 1 of its namespace, so that
// killing it ends everything it started.

type run struct {
	cmd *exec.Cmd
}

// killExecs kills the instance's commands (a stop); the caller holds s.mu.
func (in *instance) killExecs() {
	for _, r := range in.execs {
		_ = r.cmd.Process.Kill()
	}
}

type execPost struct {
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	User        uint32            `json:"user"`
	Group       uint32            `json:"group"`
	Cwd         string            `json:"cwd"`
}

// childSpec is what the child is told, as JSON in its argv.
type childSpec struct {
	Root    string   `json:"root"`
	Cwd     string   `json:"cwd"`
	Command []string `json:"command"`
	Env     []string `json:"env"`
	UID     uint32   `json:"uid"`
	GID     uint32   `json:"gid"`
}

const childEnv = "MIGRATE_INCUSHOST_CHILD"

var outputRE = regexp.MustCompile(`^exec_[0-9a-f-]+\.(stdout|stderr)$`)

func (s *Server) execRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /1.0/instances/{name}/exec", s.postExec)
	mux.HandleFunc("GET /1.0/instances/{name}/logs/exec-output/{file}", s.execOutput)
	mux.HandleFunc("DELETE /1.0/instances/{name}/logs/exec-output/{file}", s.execOutput)
	mux.HandleFunc("GET /1.0/instances/{name}/logs/exec-output", s.listExecOutput)
}

func (s *Server) postExec(w http.ResponseWriter, r *http.Request) {
	var req execPost
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	if len(req.Command) == 0 {
		fail(w, http.StatusBadRequest, "No command given")
		return
	}
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	if err == nil && !in.Running {
		err = errf(http.StatusBadRequest, "Instance is not running")
	}
	if err == nil && in.guest != nil {
		err = errf(http.StatusBadRequest, "VM %q runs a guest of its own (no agent): the lab cannot run commands in it", in.Name)
	}
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	id := newID()
	logs := filepath.Join(in.dir, "logs")
	_ = os.MkdirAll(logs, 0o755)
	outName, errName := "exec_"+id+".stdout", "exec_"+id+".stderr"
	stdout, err1 := os.Create(filepath.Join(logs, outName))
	stderr, err2 := os.Create(filepath.Join(logs, errName))
	if err := errors.Join(err1, err2); err != nil {
		fail(w, http.StatusInternalServerError, "%v", err)
		return
	}
	cmd, err := s.startChild(in, req, stdout, stderr)
	stdout.Close()
	stderr.Close()
	if err != nil {
		_ = os.Remove(filepath.Join(logs, outName))
		_ = os.Remove(filepath.Join(logs, errName))
		failErr(w, err)
		return
	}
	s.mu.Lock()
	if in.execs == nil {
		in.execs = map[string]*run{}
	}
	in.execs[id] = &run{cmd: cmd}
	running := in.Running
	s.mu.Unlock()
	if !running { // stopped while it started
		_ = cmd.Process.Kill()
	}
	base := "/1.0/instances/" + in.Name + "/logs/exec-output/"
	meta := map[string]any{"output": map[string]string{"1": base + outName, "2": base + errName}}
	op := s.ops.startID(id, "task", "Executing command", map[string][]string{"instances": {"/1.0/instances/" + in.Name}}, meta,
		func(*operation) (map[string]any, error) {
			_ = cmd.Wait()
			s.mu.Lock()
			delete(in.execs, id)
			s.mu.Unlock()
			code := cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			return map[string]any{"return": code}, nil
		})
	s.ops.async(w, op)
}

// startChild starts the command and returns once it runs, or with the
// reason it could not ("Command not found", as the daemon says it).
func (s *Server) startChild(in *instance, req execPost, stdout, stderr *os.File) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
	if req.User != 0 {
		env["HOME"] = "/"
	}
	for k, v := range req.Environment {
		env[k] = v
	}
	spec := childSpec{Root: in.rootfs(), Cwd: req.Cwd, Command: req.Command, UID: req.User, GID: req.Group}
	for k, v := range env {
		spec.Env = append(spec.Env, k+"="+v)
	}
	sort.Strings(spec.Env)
	b, _ := json.Marshal(spec)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command(self, string(b))
	cmd.Env = []string{childEnv + "=1"}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = namespaces()
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("starting the command in new namespaces: %w", err)
	}
	pw.Close()
	msg, _ := io.ReadAll(pr) // empty: the exec succeeded (the pipe closed on exec)
	if len(msg) > 0 {
		_ = cmd.Wait()
		return nil, errf(http.StatusBadRequest, "%s", msg)
	}
	return cmd, nil
}

// namespaces: the child is root in a new user namespace (the same IDs as
// the lab's when it runs as root; only its own user otherwise), with
// mounts and PIDs of its own.
func namespaces() *syscall.SysProcAttr {
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

func (s *Server) execOutput(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	file := r.PathValue("file")
	if !outputRE.MatchString(file) {
		fail(w, http.StatusNotFound, "Log file not found")
		return
	}
	p := filepath.Join(in.dir, "logs", file)
	if r.Method == http.MethodDelete {
		if err := os.Remove(p); err != nil {
			fail(w, http.StatusNotFound, "Log file not found")
			return
		}
		syncOK(w, map[string]any{})
		return
	}
	f, err := os.Open(p)
	if err != nil {
		fail(w, http.StatusNotFound, "Log file not found")
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, file, time.Time{}, f)
}

func (s *Server) listExecOutput(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	out := []string{}
	ents, _ := os.ReadDir(filepath.Join(in.dir, "logs"))
	for _, e := range ents {
		if outputRE.MatchString(e.Name()) {
			out = append(out, "/1.0/instances/"+in.Name+"/logs/exec-output/"+e.Name())
		}
	}
	syncOK(w, out)
}
