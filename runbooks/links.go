package runbooks

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Symbolic links in the runbook directory. A link that leads back into a
// directory holding it makes an endless tree for whatever follows links:
// Helm's chart loader printed a line per level, 15 KB, before it failed on
// the path's length. A link out of the directory makes the runbook use
// files that are not part of it, which a copy of it elsewhere (another
// machine, a clone of its repository) has otherwise or not at all. Every
// load walks the runbook's tree through the fs.FS (fs.ReadLinkFS; one
// without links has none to find) and reports both, naming the link,
// where it leads and what to do. Hidden entries (.git, .migrate) are
// left out, as the loader leaves out hidden files.

const (
	// maxLinkHops is how many links one path may go through, as the
	// kernel's limit (ELOOP) on Linux.
	maxLinkHops = 40
	// maxLinkWalk bounds the entries looked at: a runbook directory is
	// small, and one that holds a whole disk's tree is told so.
	maxLinkWalk = 100_000
)

// linkWalk is one walk of the runbook's tree.
type linkWalk struct {
	fsys fs.FS
	// dirs are the runbook directory as given and with its own links
	// resolved: an absolute link under one of them leads inside.
	dirs    []string
	visited map[string]bool
	loops   map[string]bool // the loops of links told, by their links
	entries int
	diags   hcl.Diagnostics
}

// level is a directory being walked: its real path (links resolved, "."
// for the root) and the link that led into it ("" for none).
type level struct{ dir, via string }

// checkLinks reports the link cycles and the links out of the runbook.
func (ld *load) checkLinks() {
	if _, ok := ld.fsys.(fs.ReadLinkFS); !ok {
		return
	}
	w := &linkWalk{fsys: ld.fsys, visited: map[string]bool{}, loops: map[string]bool{}}
	if d := ld.opts.Dir; d != "" {
		w.dirs = append(w.dirs, filepath.Clean(d))
		if r, err := filepath.EvalSymlinks(d); err == nil && r != filepath.Clean(d) {
			w.dirs = append(w.dirs, r)
		}
	}
	w.walk([]level{{dir: "."}})
	if w.entries > maxLinkWalk {
		w.diags = append(w.diags, &hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "Runbook Directory Too Large To Check",
			Detail: fmt.Sprintf("The runbook directory %s holds more than %d files and directories; the links beyond those were not checked for cycles or for leading out of it. Keep only the runbook and what it uses there.",
				ld.dirName(), maxLinkWalk),
		})
	}
	ld.diags = append(ld.diags, w.diags...)
}

// walk looks at the entries of the innermost directory of stack, and
// below it, following links to directories.
func (w *linkWalk) walk(stack []level) {
	dir := stack[len(stack)-1].dir
	w.visited[dir] = true
	entries, err := fs.ReadDir(w.fsys, dir)
	if err != nil {
		return // what uses it says why it cannot be read
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if w.entries++; w.entries > maxLinkWalk {
			return
		}
		p := joinPath(dir, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			w.link(stack, p)
		case e.IsDir():
			w.walk(append(stack, level{dir: p}))
		}
	}
}

// link checks the link at p (a real path: its directory has no links),
// and walks the directory it leads to.
func (w *linkWalk) link(stack []level, p string) {
	r := w.resolve(p)
	target, _ := fs.ReadLink(w.fsys, p)
	switch {
	case r.loop:
		// Every link of the loop finds it: told once.
		key := slices.Clone(r.chain)
		slices.Sort(key)
		key = slices.Compact(key)
		if k := strings.Join(key, "\x00"); !w.loops[k] {
			w.loops[k] = true
			w.cycle(p, target, "its links lead to one another: "+strings.Join(r.chain, " -> "))
		}
		return
	case r.out != "":
		w.diags = append(w.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Link Leads Out of the Runbook",
			Detail: fmt.Sprintf("The link %s (-> %s) leads to %s, outside the runbook directory: the runbook would use files that are not part of it, which a copy of it elsewhere (another machine, a clone of its repository) has otherwise or not at all. "+
				"Copy what it leads to into the runbook directory, or give its path where it is used (an absolute path, or a variable) instead of a link.", p, target, r.out),
		})
		return
	case r.missing:
		return // a dangling link: what uses it says it is missing
	}
	fi, err := fs.Stat(w.fsys, r.path)
	if err != nil || !fi.IsDir() {
		return
	}
	if i := slices.IndexFunc(stack, func(l level) bool { return l.dir == r.path }); i >= 0 {
		loop := []string{}
		for _, l := range stack[i+1:] {
			if l.via != "" {
				loop = append(loop, l.via)
			}
		}
		how := fmt.Sprintf("it leads to %s, a directory that holds it", displayPath(r.path))
		if len(loop) > 0 {
			how = fmt.Sprintf("it leads back to %s, through %s", displayPath(r.path), strings.Join(loop, ", "))
		}
		w.cycle(p, target, how)
		return
	}
	if !w.visited[r.path] {
		w.walk(append(stack, level{dir: r.path, via: p}))
	}
}

// cycle reports the link at p, to target, as a cycle.
func (w *linkWalk) cycle(p, target, how string) {
	w.diags = append(w.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Symbolic Link Cycle",
		Detail: fmt.Sprintf("The link %s (-> %s) makes a cycle: %s. Whatever follows links there (Helm loading a chart, a copy of the tree) never reaches an end. "+
			"Remove the link, or point it at what it was meant to include.", p, target, how),
	})
}

// resolved is where a path leads once every link in it is followed.
type resolved struct {
	path    string   // the real path inside the runbook, "." for its root
	out     string   // else the path outside it, made absolute when the runbook's directory is known
	missing bool     // a link on the way leads nowhere
	loop    bool     // more than maxLinkHops links, in a loop: the links
	chain   []string // followed, in order
}

// resolve follows the links of name (a valid fs.FS path) one element at a
// time, as the kernel would, without leaving the fs.FS.
func (w *linkWalk) resolve(name string) resolved {
	var r resolved
	cur := "." // the real directory reached so far
	rest := strings.Split(name, "/")
	for len(rest) > 0 {
		elem := rest[0]
		rest = rest[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			if cur == "." {
				r.out = w.outside(append([]string{".."}, rest...))
				return r
			}
			cur = path.Dir(cur)
			continue
		}
		next := joinPath(cur, elem)
		fi, err := fs.Lstat(w.fsys, next)
		if err != nil {
			r.missing = true
			return r
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		r.chain = append(r.chain, next)
		if len(r.chain) > maxLinkHops {
			r.loop = true
			r.chain = loopOf(r.chain)
			return r
		}
		target, err := fs.ReadLink(w.fsys, next)
		if err != nil {
			r.missing = true
			return r
		}
		if filepath.IsAbs(target) {
			rel, ok := w.inside(target)
			if !ok {
				r.out = filepath.Join(append([]string{target}, rest...)...)
				return r
			}
			cur, rest = ".", append(strings.Split(rel, "/"), rest...)
			continue
		}
		// Relative to the link's directory, where cur still is.
		rest = append(strings.Split(filepath.ToSlash(target), "/"), rest...)
	}
	r.path = cur
	return r
}

// inside turns an absolute link target under the runbook's directory into
// a path of the fs.FS.
func (w *linkWalk) inside(target string) (string, bool) {
	target = filepath.Clean(target)
	for _, d := range w.dirs {
		if rel, err := filepath.Rel(d, target); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return filepath.ToSlash(rel), true
		}
	}
	return "", false
}

// outside is where elements that climb above the runbook's root lead.
func (w *linkWalk) outside(elems []string) string {
	if len(w.dirs) == 0 {
		return filepath.Join(elems...) + " (above the runbook directory)"
	}
	return filepath.Join(append([]string{w.dirs[0]}, elems...)...)
}

// loopOf keeps the links of chain from the first one seen twice.
func loopOf(chain []string) []string {
	for i, l := range chain {
		if j := slices.Index(chain[i+1:], l); j >= 0 {
			return chain[i : i+1+j+1]
		}
	}
	return chain
}

func joinPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// displayPath names a path of the runbook, its root included.
func displayPath(p string) string {
	if p == "." {
		return "the runbook directory itself"
	}
	return p
}
