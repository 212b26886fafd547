package incus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// The trees incus_file compares and copies: a local one (scanLocal) and
// one in an instance (scanRemote), each entry with its SHA-256.

// entry is a file or directory of a tree; rel is "" for the root.
type entry struct {
	rel      string // slash-separated
	dir      bool
	mode     fs.FileMode
	uid, gid int64
	sum      string // hex SHA-256 of a file
	size     int64
}

// tree is a file (one entry) or a directory tree, sorted by rel: a
// directory comes before what it holds.
type tree []entry

// summary is the outputs: a file's SHA-256, or for a tree the SHA-256 of
// its manifest (one "rel sha256" line per file, sorted); its total size
// and number of files.
func (t tree) summary() fileOut {
	if len(t) == 1 && !t[0].dir {
		return fileOut{t[0].sum, t[0].size, 1}
	}
	h, out := sha256.New(), fileOut{}
	for _, e := range t {
		if !e.dir {
			fmt.Fprintf(h, "%s %s\n", e.rel, e.sum)
			out.Size += e.size
			out.Files++
		}
	}
	out.SHA256 = hex.EncodeToString(h.Sum(nil))
	return out
}

func (t tree) find(rel string) *entry {
	for i := range t {
		if t[i].rel == rel {
			return &t[i]
		}
	}
	return nil
}

func join(root, rel string) string {
	if rel == "" {
		return root
	}
	return root + "/" + rel
}

func hashOf(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

// scanLocal reads a local file or tree (nil when absent); only regular
// files and directories are copied.
func scanLocal(root string) (tree, error) {
	var t tree
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r // a link given as the source is followed; links inside are not
	}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() && !de.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		e := entry{rel: filepath.ToSlash(rel), dir: de.IsDir()}
		if e.rel == "." {
			e.rel = ""
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		e.mode = info.Mode().Perm()
		if !e.dir {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			e.sum, e.size, err = hashOf(f)
			f.Close()
			if err != nil {
				return err
			}
		}
		t = append(t, e)
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(t) == 0 {
		return nil, nil
	}
	slices.SortFunc(t, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return t, err
}

// scanRemote reads a file or tree in the instance (nil when absent);
// symlinks are left out.
func scanRemote(ctx context.Context, api *incusapi.Client, inst, root string) (tree, error) {
	var t tree
	var walk func(rel string) error
	walk = func(rel string) error {
		fi, r, names, err := api.GetFile(ctx, inst, join(root, rel))
		if err != nil {
			return err
		}
		e := entry{rel: rel, dir: fi.Type == "directory", mode: fi.Mode, uid: fi.UID, gid: fi.GID}
		switch {
		case fi.Type == "file":
			e.sum, e.size, err = hashOf(r)
			r.Close()
			if err != nil {
				return err
			}
		case !e.dir:
			if r != nil {
				r.Close()
			}
			return nil
		}
		t = append(t, e)
		slices.Sort(names)
		for _, n := range names {
			if err := walk(strings.TrimPrefix(rel+"/"+n, "/")); err != nil {
				return err
			}
		}
		return nil
	}
	err := walk("")
	if len(t) == 0 && (err == nil || incusapi.IsNotFound(err)) {
		return nil, nil // missing, or a symlink
	}
	slices.SortFunc(t, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return t, err
}
