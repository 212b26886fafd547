package incushost

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// The files API works on the rootfs through os.Root: no path (nor
// symlink in it) reaches outside the instance.

func (s *Server) fileRoutes(mux *http.ServeMux) {
	for _, m := range []string{"GET", "HEAD", "POST", "DELETE"} {
		mux.HandleFunc(m+" /1.0/instances/{name}/files", s.files)
	}
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	in, ok := s.requested(w, r)
	if !ok {
		return
	}
	if s.agentless(in) {
		fail(w, http.StatusInternalServerError, "VM agent isn't currently running")
		return
	}
	p := r.URL.Query().Get("path")
	if names, ok := s.agentListing(in, p); ok && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		serveListing(w, r, names)
		return
	}
	if !strings.HasPrefix(p, "/") {
		fail(w, http.StatusBadRequest, "The path %q is not absolute", p)
		return
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	root, err := os.OpenRoot(in.rootfs())
	if err != nil {
		fail(w, http.StatusInternalServerError, "%v", err)
		return
	}
	defer root.Close()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		err = getFile(w, r, root, rel)
	case http.MethodPost:
		err = pushFile(r, root, rel)
		if err == nil {
			syncOK(w, map[string]any{})
		}
	case http.MethodDelete:
		err = root.Remove(rel)
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			err = errf(http.StatusBadRequest, "Failed removing %s: directory not empty", p)
		}
		if err == nil {
			syncOK(w, map[string]any{})
		}
	}
	if err != nil {
		fileErr(w, p, err)
	}
}

func fileErr(w http.ResponseWriter, p string, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		failErr(w, err)
	case errors.Is(err, fs.ErrNotExist):
		fail(w, http.StatusNotFound, "Path %s not found", p)
	default:
		fail(w, http.StatusBadRequest, "%s: %v", p, err)
	}
}

func setHeaders(w http.ResponseWriter, fi fs.FileInfo, typ string) {
	var uid, gid uint32
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid, gid = st.Uid, st.Gid
	}
	w.Header().Set("X-Incus-Uid", strconv.FormatUint(uint64(uid), 10))
	w.Header().Set("X-Incus-Gid", strconv.FormatUint(uint64(gid), 10))
	w.Header().Set("X-Incus-Mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	w.Header().Set("X-Incus-Type", typ)
}

func getFile(w http.ResponseWriter, r *http.Request, root *os.Root, rel string) error {
	fi, err := root.Lstat(rel)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(rel)
		if err != nil {
			return err
		}
		setHeaders(w, fi, "symlink")
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, target)
		}
	case fi.IsDir():
		setHeaders(w, fi, "directory")
		if r.Method == http.MethodHead {
			return nil
		}
		f, err := root.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		if names == nil {
			names = []string{}
		}
		syncOK(w, names)
	default:
		f, err := root.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		setHeaders(w, fi, "file")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		if r.Method == http.MethodGet {
			_, _ = io.Copy(w, f)
		}
	}
	return nil
}

// pushFile creates a file, directory or symlink, or overwrites a file
// (keeping its mode and owner, as the daemon does); the parent must exist.
func pushFile(r *http.Request, root *os.Root, rel string) error {
	h := r.Header
	typ := h.Get("X-Incus-Type")
	if typ == "" {
		typ = "file"
	}
	uid, _ := strconv.Atoi(orStr(h.Get("X-Incus-Uid"), "0"))
	gid, _ := strconv.Atoi(orStr(h.Get("X-Incus-Gid"), "0"))
	mode := fs.FileMode(0)
	if m := h.Get("X-Incus-Mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			return errf(http.StatusBadRequest, "bad X-Incus-Mode %q", m)
		}
		mode = fs.FileMode(v) & fs.ModePerm
	}
	if dir := path.Dir(rel); dir != "." {
		if st, err := root.Stat(dir); err != nil || !st.IsDir() {
			return errf(http.StatusNotFound, "Path /%s not found (its parent directory does not exist)", rel)
		}
	}
	old, statErr := root.Lstat(rel)
	exists := statErr == nil
	switch typ {
	case "directory":
		if exists {
			if !old.IsDir() {
				return errf(http.StatusBadRequest, "/%s exists and is not a directory", rel)
			}
			return nil
		}
		if err := root.Mkdir(rel, orMode(mode, 0o755)); err != nil {
			return err
		}
		_ = root.Chmod(rel, orMode(mode, 0o755))
	case "symlink":
		target, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		if exists {
			_ = root.Remove(rel)
		}
		if err := root.Symlink(string(target), rel); err != nil {
			return err
		}
	case "file":
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if h.Get("X-Incus-Write") == "append" {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		}
		if exists && !old.Mode().IsRegular() {
			return errf(http.StatusBadRequest, "/%s exists and is not a file", rel)
		}
		f, err := root.OpenFile(rel, flags, orMode(mode, 0o644))
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r.Body); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if exists {
			return nil // an overwrite keeps mode and owner
		}
		_ = root.Chmod(rel, orMode(mode, 0o644))
	default:
		return errf(http.StatusBadRequest, "Unknown X-Incus-Type %q", typ)
	}
	if os.Geteuid() == 0 {
		return root.Lchown(rel, uid, gid)
	}
	return nil
}

func orStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orMode(m, def fs.FileMode) fs.FileMode {
	if m == 0 {
		return def
	}
	return m
}

// agentless reports whether in is a running VM booted from an ISO: its
// guest runs no Incus agent, so the daemon cannot reach its files.
func (s *Server) agentless(in *instance) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return in.guest != nil
}
