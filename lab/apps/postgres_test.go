package apps_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// The command of examples/homelab's synapse-postgres, and the restore
// script its export writes beside the dump.
const (
	pgCommand = `[ -e "$PGDATA/.migrate-restored" ] || rm -rf "$PGDATA"; exec docker-entrypoint.sh postgres`
	pgRestore = `pg_restore --no-owner --no-privileges --exit-on-error -U "$POSTGRES_USER" -d "$POSTGRES_DB" /docker-entrypoint-initdb.d/synapse.dump
touch "$PGDATA/.migrate-restored"
echo "restored the old Synapse's database into $POSTGRES_DB"
`
)

// pgPod is a postgres:15-bookworm container as lab/kubecp runs it: its
// command in lab/sandbox, in a root the image's Userland laid out, with
// its data and init directories mounted.
type pgPod struct {
	addr, data, init string
	env              map[string]string
	cancel           context.CancelFunc
	done             chan struct{}
	mu               sync.Mutex
	out              bytes.Buffer
	code             int
}

func (p *pgPod) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.out.Write(b)
}

func (p *pgPod) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.out.String()
}

func (p *pgPod) start(t *testing.T, image string) {
	t.Helper()
	im, err := apps.Lookup(image)
	if err != nil || im.Userland == nil {
		t.Fatalf("Lookup(%s): %+v, %v", image, im, err)
	}
	root := t.TempDir()
	for _, d := range []string{"proc", "tmp"} { // as lab/kubecp makes a container's root
		if err := os.MkdirAll(filepath.Join(root, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	imageEnv, err := im.Userland(root, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=/root", "PGDATA=/var/lib/postgresql/data/pgdata"}
	for k, v := range imageEnv {
		if k != "PGDATA" {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range p.env {
		env = append(env, k+"="+v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	cmd := sandbox.Command(ctx, sandbox.Spec{Root: root, Env: env, Argv: []string{"sh", "-c", pgCommand},
		Binds: []sandbox.Bind{{Source: p.data, Path: "/var/lib/postgresql/data"}, {Source: p.init, Path: "/docker-entrypoint-initdb.d"}}})
	cmd.Stdout, cmd.Stderr = p, p
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(p.stop)
}

func (p *pgPod) stop() {
	p.cancel()
	<-p.done
}

// psql runs the host's psql against the pod over TCP with a password.
func (p *pgPod) psql(query string) (string, error) {
	cmd := exec.Command(apps.PostgresBin("15")+"/psql", "-h", p.addr, "-U", p.env["POSTGRES_USER"], "-d", p.env["POSTGRES_DB"], "-Atc", query)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+p.env["POSTGRES_PASSWORD"], "PGCONNECT_TIMEOUT=5")
	out, err := cmd.CombinedOutput()

	return strings.TrimSpace(string(out)), err
}

// ready waits for the pod's server to answer a query (or its exit).
func (p *pgPod) ready(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := p.psql("SELECT 1")
		if err == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("postgres exited %d before it answered:\n%s", p.code, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres does not answer on %s:5432: %v\n%s", p.addr, err, p.output())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// exited waits for the pod to end by itself and returns its code.
func (p *pgPod) exited(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(2 * time.Minute):
		t.Fatalf("postgres still runs:\n%s", p.output())

		return 0
	}
}

func newPgPod(t *testing.T, addr, password string) *pgPod {
	return &pgPod{addr: addr, data: t.TempDir(), init: t.TempDir(),
		env: map[string]string{"POSTGRES_USER": "synapse", "POSTGRES_DB": "synapse", "POSTGRES_PASSWORD": password,
			"POSTGRES_INITDB_ARGS": "--encoding=UTF8 --lc-collate=C --lc-ctype=C"}}
}

// TestPostgresImage: a postgres:15-bookworm pod initialises an empty
// PGDATA as the image's entrypoint does (POSTGRES_USER a superuser whose
// password host connections need, POSTGRES_DB created, its init files
// run: here the restore of a dump pg_dump made of another pod), serves on
// the pod's address, starts again on its PGDATA without initialising it,
// and is refused by a server of another major version.
func TestPostgresImage(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("postgres runs as the image's uid 999: the sandbox maps it only when the lab runs as root")
	}
	if _, err := os.Stat(apps.PostgresBin("15") + "/postgres"); err != nil {
		t.Skip("Debian's postgresql-15 is not installed (scripts/postgres-install.sh)")
	}

	// The old database: made by an init script, dumped by pg_dump.
	old := newPgPod(t, "127.250.28.2", "old-secret")
	if err := os.WriteFile(filepath.Join(old.init, "schema.sql"), []byte("CREATE TABLE users(name TEXT);\nINSERT INTO users VALUES ('@ana:matrix.example.org');\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old.start(t, "postgres:15-bookworm")
	old.ready(t)
	if _, err := old.psql("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	old.env["POSTGRES_PASSWORD"] = "wrong"
	if out, err := old.psql("SELECT 1"); err == nil || !strings.Contains(out, "password authentication failed") {
		t.Errorf("a wrong password over TCP: %v %s, want password authentication failed", err, out)
	}
	old.env["POSTGRES_PASSWORD"] = "old-secret"

	restored := newPgPod(t, "127.250.28.3", "new-secret")
	dump := exec.Command(apps.PostgresBin("15")+"/pg_dump", "-h", old.addr, "-U", "synapse", "--format=custom", "--no-owner", "--no-privileges", "-f", filepath.Join(restored.init, "synapse.dump"), "synapse")
	dump.Env = append(os.Environ(), "PGPASSWORD=old-secret")
	if out, err := dump.CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	old.stop()

	// The new PostgreSQL restores it at its first start.
	if err := os.WriteFile(filepath.Join(restored.init, "restore-synapse.sh"), []byte(pgRestore), 0o644); err != nil {
		t.Fatal(err)
	}
	restored.start(t, "postgres:15-bookworm")
	restored.ready(t)
	if got, err := restored.psql("SELECT name FROM users"); err != nil || got != "@ana:matrix.example.org" {
		t.Errorf("the restored users: %q, %v\n%s", got, err, restored.output())
	}
	if !strings.Contains(restored.output(), "sourcing /docker-entrypoint-initdb.d/restore-synapse.sh") {
		t.Errorf("the init script was not sourced:\n%s", restored.output())
	}
	restored.stop()

	// Started again: its PGDATA is kept (the marker is there), not
	// initialised again.
	restored.out.Reset()
	restored.start(t, "postgres:15-bookworm")
	restored.ready(t)
	if got, err := restored.psql("SELECT count(*) FROM users"); err != nil || got != "1" {
		t.Errorf("after a restart, users: %q, %v", got, err)
	}
	if !strings.Contains(restored.output(), "Skipping initialization") {
		t.Errorf("the restart initialised again:\n%s", restored.output())
	}
	restored.stop()

	// A data directory of another major version: postgres refuses it.
	if err := os.WriteFile(filepath.Join(restored.data, "pgdata/PG_VERSION"), []byte("16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	restored.out.Reset()
	restored.start(t, "postgres:15-bookworm")
	if code := restored.exited(t); code == 0 || !strings.Contains(restored.output(), "database files are incompatible with server") {
		t.Errorf("a PGDATA of PostgreSQL 16 under postgres 15: exit %d\n%s", code, restored.output())
	}
}

// TestPostgresInitScriptFails: an init script that fails ends the
// container, as the image's set -e does, leaving its half-made PGDATA.
func TestPostgresInitScriptFails(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("postgres runs as the image's uid 999: the sandbox maps it only when the lab runs as root")
	}
	if _, err := os.Stat(apps.PostgresBin("15") + "/postgres"); err != nil {
		t.Skip("Debian's postgresql-15 is not installed (scripts/postgres-install.sh)")
	}
	p := newPgPod(t, "127.250.28.4", "secret")
	if err := os.WriteFile(filepath.Join(p.init, "restore-synapse.sh"), []byte(pgRestore), 0o644); err != nil { // no dump beside it
		t.Fatal(err)
	}
	p.start(t, "postgres:15-bookworm")
	if code := p.exited(t); code == 0 || !strings.Contains(p.output(), "synapse.dump") {
		t.Errorf("a failing restore: exit %d\n%s", code, p.output())
	}
	if _, err := os.Stat(filepath.Join(p.data, "pgdata/PG_VERSION")); err != nil {
		t.Errorf("the half-made PGDATA is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.data, "pgdata/.migrate-restored")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed restore left its marker: %v", err)
	}
}

// TestPostgresImageTags: the lab runs postgres images by their major
// version, and says what to install for one the host lacks.
func TestPostgresImageTags(t *testing.T) {
	for _, tag := range []string{"15", "15-bookworm", "15.8", "15.8-bookworm"} {
		if im, err := apps.Lookup("postgres:" + tag); err != nil || im.Userland == nil || !im.Command {
			t.Errorf("postgres:%s: %+v, %v", tag, im, err)
		}
	}
	if _, err := apps.Lookup("postgres:latest"); err == nil {
		t.Error("postgres:latest: no error, want one naming the major-version tags")
	}
	im, err := apps.Lookup("postgres:9999-bookworm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := im.Userland(t.TempDir(), "127.250.28.5"); err == nil || !strings.Contains(err.Error(), "postgresql-9999") {
		t.Errorf("a major the host lacks: %v, want the package to install named", err)
	}
}

// TestSynapseOnPostgres: Synapse with database.name psycopg2 reaches the
// postgres pod by its Service's name (the pod's Resolve), with the
// configured password, brings the schema markers up to its version and
// serves; a schema too new for it, or a wrong password, ends it saying so.
func TestSynapseOnPostgres(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("postgres runs as the image's uid 999: the sandbox maps it only when the lab runs as root")
	}
	if _, err := os.Stat(apps.PostgresBin("15") + "/postgres"); err != nil {
		t.Skip("Debian's postgresql-15 is not installed (scripts/postgres-install.sh)")
	}
	pg := newPgPod(t, "127.250.28.6", "db-secret")
	if err := os.WriteFile(filepath.Join(pg.init, "users.sql"), []byte("CREATE TABLE users(name TEXT);\nINSERT INTO users VALUES ('@ana:matrix.example.org');\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pg.start(t, "postgres:15-bookworm")
	pg.ready(t)

	resolve := func(_ context.Context, host string) (string, error) {
		if host == "synapse-postgres" {
			return pg.addr, nil
		}
		return "", errors.New("no such host")
	}
	synapse := func(password, addr string) *run {
		config := t.TempDir()
		write(t, filepath.Join(config, "homeserver.yaml"), "server_name: matrix.example.org\nreport_stats: false\n"+
			"database:\n  name: psycopg2\n  args:\n    user: synapse\n    password: '"+password+"'\n    dbname: synapse\n    host: synapse-postgres\n")
		return start(t, "matrixdotorg/synapse:v1.120.2", &apps.Container{Env: map[string]string{"SYNAPSE_CONFIG_PATH": "/config/homeserver.yaml"},
			Mounts: map[string]string{"/config": config}, Addr: addr, Resolve: resolve})
	}

	if r := synapse("wrong", "127.250.28.7"); r.exits(t) == 0 || !strings.Contains(r.out.String(), "password authentication failed") {
		t.Errorf("a wrong password: output\n%s", r.out)
	}

	r := synapse("db-secret", "127.250.28.8")
	if got := r.get(t, "http://127.250.28.8:8008/health"); got != "OK" {
		t.Fatalf("/health = %q\n%s", got, r.out)
	}
	if got, err := pg.psql("SELECT version, compat_version FROM schema_version, schema_compat_version"); err != nil || got != "88|84" {
		t.Errorf("the schema markers after v1.120.2 started: %q, %v; want 88|84", got, err)
	}
	r.stop()
	r.exits(t)

	if _, err := pg.psql("UPDATE schema_compat_version SET compat_version = 89"); err != nil {
		t.Fatal(err)
	}
	if r := synapse("db-secret", "127.250.28.9"); r.exits(t) == 0 || !strings.Contains(r.out.String(), "too new for the server to understand") {
		t.Errorf("a schema too new: output\n%s", r.out)
	}
}
