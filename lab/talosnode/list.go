package talosnode

import (
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// List implements machine.MachineServiceServer (talosctl ls): the
// directory itself, then its entries (with Recurse, down to
// RecursionDepth; 0 is unlimited), each with its mode as Go's
// fs.FileMode, as machined's walker sends them; under the node root or a
// virtiofs share, never outside.
func (s *server) List(in *machine.ListRequest, srv machine.MachineService_ListServer) error {
	p := in.GetRoot()
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}

	p = path.Clean(p)

	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}

	base := s.n.rootDir
	if dir, inMount, ok := s.n.resolveMount(p); ok {
		base, rel = dir, inMount
	}

	root, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer root.Close() //nolint:errcheck

	if _, err := root.Stat(rel); err != nil {
		return readError(p, err)
	}

	maxDepth := 1
	if in.GetRecurse() {
		maxDepth = int(in.GetRecursionDepth()) // 0: no limit
	}

	return fs.WalkDir(root.FS(), rel, func(name string, d fs.DirEntry, err error) error {
		relative := strings.TrimPrefix(strings.TrimPrefix(name, rel), "/")
		if relative == "" {
			relative = "."
		}

		info := &machine.FileInfo{Name: path.Join(p, relative), RelativeName: relative}

		if err != nil {
			info.Error = err.Error()

			return srv.Send(info)
		}

		if fi, err := d.Info(); err == nil {
			info.Size, info.Mode, info.Modified, info.IsDir = fi.Size(), uint32(fi.Mode()), fi.ModTime().Unix(), fi.IsDir()
		}

		if err := srv.Send(info); err != nil {
			return err
		}

		if d.IsDir() && relative != "." && maxDepth > 0 && strings.Count(relative, "/")+1 >= maxDepth {
			return fs.SkipDir
		}

		return nil
	})
}
