package incushost

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

// killExecs kills the instance's init, and with it every command (a
// stop); the caller holds s.mu.
func (in *instance) killExecs() {
	if in.init != nil {
		in.init.kill()
		in.init = nil
	}
}

type execPost struct {
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	User        uint32            `json:"user"`
	Group       uint32            `json:"group"`
	Cwd         string            `json:"cwd"`
}

var outputRE = regexp.MustCompile(`^exec_[0-9a-f-]+\.(stdout|stderr)$`)

func (s *Server) execRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /1.0/instances/{name}/exec", s.postExec)
	mux.HandleFunc("GET /1.0/instances/{name}/logs/exec-output/{file}", s.execOutput)
	mux.HandleFunc("DELETE /1.0/instances/{name}/logs/exec-output/{file}", s.execOutput)
	mux.HandleFunc("GET /1.0/instances/{name}/logs/exec-output", s.listExecOutput)
}

func (s *Server) postExec(w http.ResponseWriter, r *http.Request) {
	var wsReq execWSPost
	if err := json.NewDecoder(r.Body).Decode(&wsReq); err != nil {
		fail(w, http.StatusBadRequest, "bad request: %v", err)
		return
	}
	req := wsReq.execPost
	if len(req.Command) == 0 {
		fail(w, http.StatusBadRequest, "No command given")
		return
	}
	s.mu.Lock()
	in, err := s.lookup(r.PathValue("name"))
	if err == nil && !in.Running {
		err = errf(http.StatusBadRequest, "Instance is not running")
	}
	if err == nil && in.init == nil {
		// A VM booted from an ISO runs a guest of its own, no agent: the
		// daemon's words for it.
		err = errf(http.StatusInternalServerError, "VM agent isn't currently running")
	}
	var (
		init   *initProc
		booted chan struct{}
	)
	if err == nil {
		init, booted = in.init, in.booted
	}
	s.mu.Unlock()
	if err != nil {
		failErr(w, err)
		return
	}
	waitBooted(booted) // a Debian VM's services come up first
	if wsReq.WaitForWS {
		s.execWebsocket(w, in, init, wsReq)
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
	proc, err := init.exec(execSpec{Command: req.Command, Env: execEnv(req), Cwd: req.Cwd, UID: req.User, GID: req.Group}, stdout, stderr)
	stdout.Close()
	stderr.Close()
	if err != nil {
		_ = os.Remove(filepath.Join(logs, outName))
		_ = os.Remove(filepath.Join(logs, errName))
		failErr(w, err)
		return
	}
	if s.opts.OnExec != nil {
		s.opts.OnExec(in.Name, req.Command)
	}
	s.mu.Lock()
	if in.execs == nil {
		in.execs = map[string]bool{}
	}
	in.execs[id] = true
	s.mu.Unlock()
	base := "/1.0/instances/" + in.Name + "/logs/exec-output/"
	meta := map[string]any{"output": map[string]string{"1": base + outName, "2": base + errName}}
	op := s.ops.startID(id, "task", "Executing command", map[string][]string{"instances": {"/1.0/instances/" + in.Name}}, meta,
		func(*operation) (map[string]any, error) {
			code := proc.wait()
			s.mu.Lock()
			delete(in.execs, id)
			s.mu.Unlock()
			return map[string]any{"return": code}, nil
		})
	s.ops.async(w, op)
}

// execEnv is the command's environment: the daemon's defaults, then the
// request's.
func execEnv(req execPost) []string {
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
	if req.User != 0 {
		env["HOME"] = "/"
	}
	maps.Copy(env, req.Environment)
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (s *Server) execOutput(w http.ResponseWriter, r *http.Request) {
	in, ok := s.requested(w, r)
	if !ok {
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
	in, ok := s.requested(w, r)
	if !ok {
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
