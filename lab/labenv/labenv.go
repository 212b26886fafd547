package labenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File is the name of the file under the lab's directory.
const File = "lab.env"

// DefaultDir is the lab's directory without --dir: the user's runtime
// directory, else the temporary one.
func DefaultDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "migrate-lab")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("migrate-lab-%d", os.Getuid()))
}

// Socket is the Incus socket of the lab in dir.
func Socket(dir string) string { return filepath.Join(dir, "incus", "unix.socket") }

// Write replaces dir's lab.env with env (KEY=VALUE each).
func Write(dir string, env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.Contains(kv, "\n") {
			return fmt.Errorf("lab env: %q is not one KEY=VALUE line", kv)
		}
	}
	path := filepath.Join(dir, File)
	if err := os.WriteFile(path+".tmp", []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Remove removes dir's lab.env (the lab stops).
func Remove(dir string) { os.Remove(filepath.Join(dir, File)) }

// Read returns the env of the lab running in dir; the error says how to
// start one when none runs there (no lab.env, or its socket is dead: a
// lab killed hard).
func Read(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no lab runs in %s (no %s there): start one with `migrate-lab serve --dir %s`", dir, File, dir)
	}
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("unix", Socket(dir), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("no lab runs in %s (its Incus socket does not answer: %v): start one with `migrate-lab serve --dir %s`", dir, err, dir)
	}
	c.Close()
	var env []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			env = append(env, l)
		}
	}
	return env, nil
}
