package incushost

import (
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// SFTP (GET /1.0/instances/{name}/sftp with Upgrade: sftp, what
// `incus file pull`, `push` and `mount` speak since the daemon has
// instances_files_sftp): the connection is switched to the SFTP protocol
// over the instance's root file system, confined to it by an os.Root (a
// symbolic link cannot lead out). As the files API, it sees the rootfs,
// not what is mounted over it in a running container.

func (s *Server) sftpRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /1.0/instances/{name}/sftp", s.serveSFTP)
}

func (s *Server) serveSFTP(w http.ResponseWriter, r *http.Request) {
	in, ok := s.requested(w, r)
	if !ok {
		return
	}
	if s.agentless(in) {
		fail(w, http.StatusInternalServerError, "VM agent isn't currently running")
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "sftp") {
		fail(w, http.StatusBadRequest, "Missing or invalid upgrade header")
		return
	}
	root, err := os.OpenRoot(in.rootfs())
	if err != nil {
		fail(w, http.StatusInternalServerError, "%v", err)
		return
	}
	defer root.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		fail(w, http.StatusInternalServerError, "Webserver doesn't support hijacking")
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: sftp\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		return
	}
	h := rootedFS{root}
	rw := struct {
		io.Reader
		io.WriteCloser
	}{io.MultiReader(buf.Reader, conn), conn} // what the server had read ahead comes first
	srv := sftp.NewRequestServer(rw, sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h})
	_ = srv.Serve() // ends with the connection
	srv.Close()
}

// rootedFS serves SFTP requests inside an os.Root.
type rootedFS struct{ root *os.Root }

// rel is a request's path relative to the root ("." for /).
func rel(p string) string {
	r := strings.TrimPrefix(path.Clean("/"+p), "/")
	if r == "" {
		return "."
	}
	return r
}

func (f rootedFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	return f.root.Open(rel(r.Filepath))
}

func (f rootedFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	flags := os.O_WRONLY | os.O_CREATE
	if r.Pflags().Trunc {
		flags |= os.O_TRUNC
	}
	return f.root.OpenFile(rel(r.Filepath), flags, 0o644)
}

func (f rootedFS) Filecmd(r *sftp.Request) error {
	p := rel(r.Filepath)
	switch r.Method {
	case "Setstat":
		return f.setstat(p, r)
	case "Rename", "PosixRename":
		return f.root.Rename(p, rel(r.Target))
	case "Rmdir", "Remove":
		return f.root.Remove(p)
	case "Mkdir":
		return f.root.Mkdir(p, 0o755)
	case "Symlink":
		return f.root.Symlink(r.Filepath, rel(r.Target))
	case "Link":
		return f.root.Link(p, rel(r.Target))
	}
	return sftp.ErrSSHFxOpUnsupported
}

// setstat applies what the client sets: mode, owner, times, size.
func (f rootedFS) setstat(p string, r *sftp.Request) error {
	attrs, flags := r.Attributes(), r.AttrFlags()
	if flags.Permissions {
		if err := f.root.Chmod(p, attrs.FileMode().Perm()); err != nil {
			return err
		}
	}
	if flags.UidGid {
		if err := f.root.Lchown(p, int(attrs.UID), int(attrs.GID)); err != nil {
			return err
		}
	}
	if flags.Acmodtime {
		if err := f.root.Chtimes(p, attrs.AccessTime(), attrs.ModTime()); err != nil {
			return err
		}
	}
	if flags.Size {
		file, err := f.root.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer file.Close()
		return file.Truncate(int64(attrs.Size))
	}
	return nil
}

func (f rootedFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	p := rel(r.Filepath)
	switch r.Method {
	case "List":
		d, err := f.root.Open(p)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		infos, err := d.Readdir(-1)
		if err != nil {
			return nil, err
		}
		return lister(infos), nil
	case "Stat":
		fi, err := f.root.Stat(p)
		if err != nil {
			return nil, err
		}
		return lister{fi}, nil
	case "Lstat":
		fi, err := f.root.Lstat(p)
		if err != nil {
			return nil, err
		}
		return lister{fi}, nil
	case "Readlink":
		target, err := f.root.Readlink(p)
		if err != nil {
			return nil, err
		}
		return lister{linkInfo(target)}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

type lister []os.FileInfo

func (l lister) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if n < len(out) {
		return n, io.EOF
	}
	return n, nil
}

// linkInfo carries a link's target as the name Readlink answers with.
type linkInfo string

func (l linkInfo) Name() string       { return string(l) }
func (l linkInfo) Size() int64        { return 0 }
func (l linkInfo) Mode() os.FileMode  { return os.ModeSymlink }
func (l linkInfo) ModTime() time.Time { return time.Time{} }
func (l linkInfo) IsDir() bool        { return false }
func (l linkInfo) Sys() any           { return nil }
