package deps

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// elfMagic starts every Linux program and shared object.
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

// TestNoProgramTracked fails when git tracks a compiled program: a binary
// in the repository is unreviewable, grows every clone for good, and runs
// as whatever it was built from, not as the source beside it.
func TestNoProgramTracked(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v (the test reads the repository's tracked files)", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var programs []string
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		if isELF(t, filepath.Join(root, name)) {
			programs = append(programs, name)
		}
	}
	if len(programs) > 0 {
		t.Fatalf("git tracks compiled programs: %s\nremove them (git rm --cached) and cover them in .gitignore: make build writes programs to bin/", strings.Join(programs, ", "))
	}
}

// TestIsELF keeps the check above from passing by never recognising one.
func TestIsELF(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !isELF(t, self) {
		t.Fatalf("the test binary %s is not seen as a program", self)
	}
	if isELF(t, "deps_test.go") {
		t.Fatal("a Go source file is seen as a program")
	}
}

func isELF(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) { // deleted in the work tree, not yet in the index
			return false
		}
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	head := make([]byte, len(elfMagic))
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return bytes.Equal(head, elfMagic)
}
