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

// addrFile holds the address of the lab's Incus host (host:port): how
// Read tells a running lab from one killed hard.
const addrFile = "incus.addr"

// ClientConfig is the INCUS_CONF directory of the lab in dir: the incus
// CLI's configuration whose default remote, "lab", is its Incus host.
func ClientConfig(dir string) string { return filepath.Join(dir, "incus-client") }

// Write replaces dir's lab.env with env (KEY=VALUE each), and records
// incusAddr, the HTTPS address of its Incus host.
func Write(dir, incusAddr string, env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.Contains(kv, "\n") {
			return fmt.Errorf("lab env: %q is not one KEY=VALUE line", kv)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, addrFile), []byte(incusAddr+"\n"), 0o600); err != nil {
		return err
	}
	path := filepath.Join(dir, File)
	if err := os.WriteFile(path+".tmp", []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Remove removes dir's lab.env (the lab stops).
func Remove(dir string) {
	os.Remove(filepath.Join(dir, File))
	os.Remove(filepath.Join(dir, addrFile))
}

// IncusAddr is the HTTPS address (host:port) of the Incus host of the lab
// in dir, as its lab.env was written.
func IncusAddr(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, addrFile))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Read returns the env of the lab running in dir; the error says how to
// start one when none runs there (no lab.env, or its Incus host does not
// answer: a lab killed hard).
func Read(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no lab runs in %s (no %s there): start one with `migrate-lab serve --dir %s`", dir, File, dir)
	}
	if err != nil {
		return nil, err
	}
	addr, err := IncusAddr(dir)
	if err != nil {
		return nil, fmt.Errorf("no lab runs in %s (%v): start one with `migrate-lab serve --dir %s`", dir, err, dir)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("no lab runs in %s (its Incus host at %s does not answer: %v): start one with `migrate-lab serve --dir %s`", dir, addr, err, dir)
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
