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

// Bounds of a tree read from an instance. A VM's agent answers its
// listings, so a compromised guest can answer a directory that contains
// itself, or millions of names: the walk stops at these instead of at the
// stack's limit or the machine's memory.
const (
	// defaultMaxFiles is the entries a tree may have unless the step's
	// max_files says more.
	defaultMaxFiles = 100_000
	// maxDepth is the deepest a tree may go (64 directories under its root).
	maxDepth = 64
)

// guestName checks a name the instance listed in a directory: a name is
// one element, joined under the directory, so it must not leave it.
func guestName(n string) error {
	switch {
	case n == "" || n == "." || n == "..":
		return fmt.Errorf("the name %q", n)
	case strings.ContainsAny(n, "/\x00"):
		return fmt.Errorf("the name %q (with a slash or a NUL byte)", n)
	}
	return nil
}

// hostileTreeError is a listing of the instance that a real directory
// cannot have, or a tree beyond the bounds: nothing is copied.
type hostileTreeError struct {
	Inst, Dir string // the directory whose listing is refused
	Why       string
}

func (e *hostileTreeError) Error() string {
	return fmt.Sprintf("%s:%s: %s", e.Inst, e.Dir, e.Why)
}

// scanRemote reads a file or tree in the instance (nil when absent);
// symlinks are left out. Each listed name is checked before it is
// joined, and the tree is bounded (maxFiles entries, maxDepth levels).
func scanRemote(ctx context.Context, api *incusapi.Client, inst, root string, maxFiles int) (tree, error) {
	var t tree
	seen := 0
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		dir := join(root, rel)
		fi, r, names, err := api.GetFile(ctx, inst, dir)
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
		if !e.dir || len(names) == 0 {
			return nil
		}
		slices.Sort(names)
		if err := checkListing(inst, dir, names, depth, &seen, maxFiles); err != nil {
			return err
		}
		for _, n := range names {
			if err := walk(strings.TrimPrefix(rel+"/"+n, "/"), depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	err := walk("", 0)
	if len(t) == 0 && (err == nil || incusapi.IsNotFound(err)) {
		return nil, nil // missing, or a symlink
	}
	slices.SortFunc(t, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return t, err
}

// checkListing refuses a directory's sorted listing before any of its names is
// used: a name that is not one element, a name twice, a directory deeper
// than maxDepth, or more entries in the tree than maxFiles.
func checkListing(inst, dir string, names []string, depth int, seen *int, maxFiles int) error {
	refuse := func(format string, args ...any) error {
		return &hostileTreeError{Inst: inst, Dir: dir, Why: fmt.Sprintf(format, args...)}
	}
	if depth >= maxDepth {
		return refuse("the tree goes deeper than %d directories (a directory that contains itself, as a guest's agent can answer?); migrate copies no deeper: copy the subtree in a step of its own, with it as the source", maxDepth)
	}
	if *seen += len(names); *seen > maxFiles {
		return refuse("the tree has more than %d entries (max_files); raise the step's max_files if the tree is really that large", maxFiles)
	}
	for i, n := range names {
		if err := guestName(n); err != nil {
			return refuse("the instance listed %v, which is not a file name: nothing is copied from a listing that names a path outside its directory (a compromised guest agent can answer so)", err)
		}
		if i > 0 && names[i-1] == n {
			return refuse("the instance listed the name %q twice, which a directory cannot hold", n)
		}
	}
	return nil
}
