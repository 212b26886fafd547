package helm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Charts on disk. Helm's loader follows every symbolic link of a chart
// directory, and one that leads back into a directory holding it for
// ever: a log line per level (15 KB of them), then an error naming a path
// of that length. So a chart directory is walked first, its links followed
// as Helm would, and a cycle (or a link to nothing) is refused in one line
// before Helm sees it; any other error of the loader is told as the file
// and why. (The runbook loader refuses cycles inside the runbook
// directory already; this is for a chart given by an absolute path.)

// chartLinks returns the error of a link under dir (shown as shown) that
// leads back into a directory holding it, or to nothing (Helm's loader
// fails on it, naming the missing target and not the link), nil when
// there is none.
func chartLinks(dir, shown string) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil // the loader says why it cannot be read
	}
	visited := map[string]bool{}
	var walk func(real, shown string, stack []string) error
	walk = func(real, shown string, stack []string) error {
		visited[real] = true
		entries, err := os.ReadDir(real)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue // .git and the like; Helm ignores them too
			}
			p, sp := filepath.Join(real, e.Name()), filepath.Join(shown, e.Name())
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				fi, err := os.Stat(p)
				switch {
				case errors.Is(err, syscall.ELOOP):
					return fmt.Errorf("%s (-> %s) is a symbolic link that leads back to itself through other links; remove it, or point it at what the chart should include", sp, target)
				case errors.Is(err, fs.ErrNotExist):
					return fmt.Errorf("%s (-> %s) is a symbolic link to nothing: %s does not exist; remove the link, or point it at what the chart should include", sp, target, target)
				case err != nil || !fi.IsDir():
					continue // the loader says what is wrong, if anything
				}
				to, err := filepath.EvalSymlinks(p)
				if err != nil {
					continue
				}
				if slices.Contains(stack, to) {
					return fmt.Errorf("%s (-> %s) is a symbolic link to a directory that holds it, so following it never ends; remove it, or point it at what the chart should include", sp, target)
				}
				if !visited[to] {
					if err := walk(to, sp, append(stack, to)); err != nil {
						return err
					}
				}
			case e.IsDir():
				if err := walk(p, sp, append(stack, p)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(root, shown, []string{root})
}

// loadError is an error of Helm's loader for the chart at dir (shown as
// shown): the file, relative to the chart, and why; never a path
// thousands of characters long.
func loadError(dir, shown string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	file := pe.Path
	if rel, rerr := filepath.Rel(dir, file); rerr == nil && !strings.HasPrefix(rel, "..") {
		file = filepath.Join(shown, rel)
	}
	if len(file) > maxShownPath {
		file = file[:maxShownPath/2] + "…" + file[len(file)-maxShownPath/2:]
	}
	return fmt.Errorf("%s: %v", file, pe.Err)
}

// maxShownPath is the longest path a message quotes whole.
const maxShownPath = 160
