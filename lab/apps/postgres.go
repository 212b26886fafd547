package apps

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The postgres images (postgres:MAJOR[-bookworm|.MINOR...]) are plain
// userlands whose PostgreSQL is real: their containers run their command
// in lab/sandbox with the host's /usr, where Debian's postgresql-MAJOR
// lives (/usr/lib/postgresql/MAJOR/bin: scripts/postgres-install.sh),
// and a root prepared as the image's: docker-entrypoint.sh (the image's,
// cut to what the lab uses: postgres-entrypoint.sh), the postgres user
// (uid 999), /var/run/postgresql, and the image's PATH and PGDATA.

//go:embed postgres-entrypoint.sh
var postgresEntrypoint string

// postgresUID is the postgres user of the official image (Debian
// variant): 999:999.
const postgresUID = 999

// PostgresBin is where the host keeps the programs of a PostgreSQL major
// version (Debian's layout); a variable so tests can point elsewhere.
var PostgresBin = func(major string) string { return "/usr/lib/postgresql/" + major + "/bin" }

// Userland prepares a container's root for a plain userland image: its
// files, and the env the image sets (kept unless the pod sets them).
type Userland func(root, addr string) (env map[string]string, err error)

// postgresMajor is the major version of a postgres image's tag: "15" of
// "15", "15-bookworm", "15.8", "15.8-bookworm".
func postgresMajor(tag string) (string, error) {
	major, _, _ := strings.Cut(tag, "-")
	major, _, _ = strings.Cut(major, ".")
	if _, err := ParseVersion(major + ".0"); err != nil || major == "" {
		return "", fmt.Errorf("postgres:%s: the lab runs postgres images by their major version (postgres:15, postgres:15-bookworm), not tag %q", tag, tag)
	}

	return major, nil
}

// postgresUserland is the root of a postgres:MAJOR container.
func postgresUserland(tag string) (Userland, error) {
	major, err := postgresMajor(tag)
	if err != nil {
		return nil, err
	}

	bin := PostgresBin(major)

	return func(root, addr string) (map[string]string, error) {
		if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil {
			return nil, fmt.Errorf("postgres:%s: the host has no PostgreSQL %s (%s): install Debian's postgresql-%s (scripts/postgres-install.sh, in make services)", tag, major, bin, major)
		}

		if err := writePostgresRoot(root, addr); err != nil {
			return nil, err
		}

		return map[string]string{
			"PATH":     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + bin,
			"PGDATA":   "/var/lib/postgresql/data",
			"PG_MAJOR": major,
		}, nil
	}, nil
}

// writePostgresRoot lays out what the image has besides /usr.
func writePostgresRoot(root, addr string) error {
	files := map[string]string{
		"etc/passwd":                         fmt.Sprintf("root:x:0:0:root:/root:/bin/bash\npostgres:x:%d:%d::/var/lib/postgresql:/bin/bash\n", postgresUID, postgresUID),
		"etc/group":                          fmt.Sprintf("root:x:0:\npostgres:x:%d:\n", postgresUID),
		"usr/local/bin/docker-entrypoint.sh": strings.Replace(postgresEntrypoint, "@LISTEN@", addr, 1),
	}

	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}

		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			return err
		}
	}

	// A runtime's /dev has these; the entrypoint's bash reads <(...)
	// through /dev/fd.
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
			return err
		}

		if err := os.Symlink(target, filepath.Join(root, "dev", name)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}

	for _, d := range []string{"var/run/postgresql", "var/lib/postgresql"} {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}

		if err := os.Lchown(p, postgresUID, postgresUID); err != nil && os.Geteuid() == 0 {
			return err
		}
	}

	return nil
}
