package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
)

// A script an exec step runs is one of its inputs: edited after a plan
// was saved, run --plan refuses the plan; edited after the step ran, the
// next plan says its inputs changed. Only the program an argv runs is
// taken for a script: argv[0] given as a path, or the first argument
// after an interpreter (sh do.sh, python3 tool.py), when it is a regular
// file inside the runbook directory. Any other argument that names a file
// may be one the command writes (cp a b), which must not make the step
// run again.

// interpreters run the file named by their first argument that is not a
// flag, unless a flag of theirs says the code is given inline (sh -c,
// python3 -m, perl -e).
var interpreters = map[string][]string{
	"sh": {"-c"}, "bash": {"-c"}, "dash": {"-c"}, "zsh": {"-c"}, "ksh": {"-c"},
	"python": {"-c", "-m"}, "python3": {"-c", "-m"},
	"perl": {"-e", "-E"}, "ruby": {"-e"}, "node": {"-e", "-p"},
}

// digestExec digests the scripts of an exec step's command and revert.
func digestExec(_ context.Context, c *call, a execAttrs) (string, phases.Diagnostics) {
	dir := c.Settings.workdir(a.Dir)
	h := sha256.New()
	n := 0
	for _, argv := range [][]string{a.Command, a.Revert} {
		path := scriptOf(argv)
		if path == "" {
			continue
		}
		full, rel, ok := c.Settings.inRunbook(under(dir, path))
		if !ok {
			continue
		}
		if err := digestFile(h, full, rel); err != nil {
			return "", phases.Errorf("Cannot Read Script", "%s runs %s, which cannot be read: %v.", c.Addr, path, err)
		}
		n++
	}
	if n == 0 {
		return "", nil
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// scriptOf is the file argv runs, "" when it runs a program from PATH
// or a command string.
func scriptOf(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	inline, interpreter := interpreters[filepath.Base(argv[0])]
	if !interpreter {
		if strings.ContainsRune(argv[0], '/') {
			return argv[0]
		}
		return ""
	}
	for _, arg := range argv[1:] {
		switch {
		case slices.Contains(inline, arg):
			return "" // a command string or a module, not a file
		case strings.HasPrefix(arg, "-"):
			continue
		}
		return arg
	}
	return ""
}

// inRunbook resolves path and says whether it is a regular file inside
// the runbook directory, and where there (a runbook moved elsewhere
// keeps its digests).
func (p *Provider) inRunbook(path string) (real, rel string, ok bool) {
	if p.dir == "" {
		return "", "", false
	}
	root, err := filepath.EvalSymlinks(p.dir)
	if err != nil {
		return "", "", false
	}
	if real, err = filepath.EvalSymlinks(path); err != nil {
		return "", "", false
	}
	rel, err = filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", "", false
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return "", "", false
	}
	return real, rel, true
}

// digestFile writes a file's name in the runbook and its bytes to h.
func digestFile(h io.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\x00", name)
	_, err = io.Copy(h, f)
	fmt.Fprint(h, "\x00")
	return err
}
