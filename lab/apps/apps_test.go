package apps_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/apps"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// The stand-ins listen on 127.154.250.N: the pods' half of 127/8 for a
// node whose address ends in .250, which no test node has.

type run struct {
	out  *providertest.SyncBuffer
	done chan int
	stop context.CancelFunc
}

func start(t *testing.T, image string, c *apps.Container) *run {
	t.Helper()

	im, err := apps.Lookup(image)
	if err != nil || im.Program == nil {
		t.Fatalf("Lookup(%s) = %+v, %v", image, im, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	r := &run{out: &providertest.SyncBuffer{}, done: make(chan int, 1), stop: cancel}
	c.Out = r.out

	if c.Root == "" {
		c.Root = t.TempDir()
	}

	go func() { r.done <- im.Program(ctx, c) }()

	t.Cleanup(func() {
		cancel()
		<-r.done
	})

	return r
}

// exits waits for the program's end and returns its code.
func (r *run) exits(t *testing.T) int {
	t.Helper()

	select {
	case code := <-r.done:
		r.done <- code

		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("still running; output:\n%s", r.out)

		return 0
	}
}

// get waits until url answers (a deadline for a busy machine) and
// returns its body; it fails the test if the program exits first.
func (r *run) get(t *testing.T, url string) string {
	t.Helper()

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case code := <-r.done:
			r.done <- code
			t.Fatalf("exited %d before serving %s; output:\n%s", code, url, r.out)
		default:
		}

		resp, err := http.Get(url) //nolint:noctx
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()

			return string(b)
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: %v; output:\n%s", url, err, r.out)
		}

		time.Sleep(50 * time.Millisecond)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sqlite(t *testing.T, db, script string) {
	t.Helper()

	if out, err := exec.Command("python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()", db, script).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

const synapseTables = `CREATE TABLE schema_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, version INTEGER NOT NULL, upgraded BOOL NOT NULL);
CREATE TABLE schema_compat_version(Lock CHAR(1) NOT NULL DEFAULT 'X' UNIQUE, compat_version INTEGER NOT NULL);
CREATE TABLE users(name TEXT);
INSERT INTO users VALUES ('@alice:example.org');
`

// synapseHost is Debian's layout seen by the image: homeserver.yaml
// without server_name, conf.d with it, the database beside.
func synapseHost(t *testing.T, schema, compat int) (config, data string) {
	config, data = t.TempDir(), t.TempDir()
	write(t, filepath.Join(config, "homeserver.yaml"), "database:\n  name: sqlite3\n  args:\n    database: /data/homeserver.db\nlisteners:\n  - port: 8008\n    type: http\n")
	write(t, filepath.Join(config, "conf.d", "server_name.yaml"), "server_name: example.org\n")
	write(t, filepath.Join(config, "conf.d", "report_stats.yaml"), "report_stats: false\n")
	sqlite(t, filepath.Join(data, "homeserver.db"), synapseTables+
		"INSERT INTO schema_version(version, upgraded) VALUES ("+strconv.Itoa(schema)+", 1); INSERT INTO schema_compat_version(compat_version) VALUES ("+strconv.Itoa(compat)+");")

	return config, data
}

func TestSynapseMergesConfDAndServesHealth(t *testing.T) {
	config, data := synapseHost(t, 84, 83)
	r := start(t, "matrixdotorg/synapse:v1.120.2", &apps.Container{
		Args:   []string{"run", "--config-path=/config/homeserver.yaml", "--config-path", "/config/conf.d"},
		Mounts: map[string]string{"/config": config, "/data": data}, Addr: "127.154.250.1",
	})

	if got := r.get(t, "http://127.154.250.1:8008/health"); got != "OK" {
		t.Fatalf("/health = %q", got)
	}

	if got := r.get(t, "http://127.154.250.1:8008/_matrix/client/versions"); !strings.Contains(got, `"versions"`) {
		t.Fatalf("/_matrix/client/versions = %q", got)
	}

	// brought up to v1.120's schema (88) and compat (84), as prepare_database does
	out, err := exec.Command("python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute('SELECT version FROM schema_version').fetchone()[0], c.execute('SELECT compat_version FROM schema_compat_version').fetchone()[0])", filepath.Join(data, "homeserver.db")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "88 84" {
		t.Fatalf("schema after start = %q, %v; want 88 84", out, err)
	}
}

func TestSynapseRefusesConfigWithoutServerName(t *testing.T) {
	config, data := synapseHost(t, 84, 83)
	// conf.d not given: the homeserver.yaml of Debian's package alone
	r := start(t, "matrixdotorg/synapse:v1.120", &apps.Container{
		Env:    map[string]string{"SYNAPSE_CONFIG_PATH": "/config/homeserver.yaml"},
		Mounts: map[string]string{"/config": config, "/data": data}, Addr: "127.154.250.2",
	})

	if code := r.exits(t); code == 0 || !strings.Contains(r.out.String(), "Missing mandatory `server_name` config option.") {
		t.Fatalf("exit %d, output:\n%s", code, r.out)
	}
}

func TestSynapseRefusesNewerSchema(t *testing.T) {
	// compat 89: a database a future Synapse made incompatible with 88
	config, data := synapseHost(t, 94, 89)
	r := start(t, "ghcr.io/element-hq/synapse:v1.120.2", &apps.Container{
		Args:   []string{"--config-path=/config/homeserver.yaml", "--config-path=/config/conf.d/"},
		Mounts: map[string]string{"/config": config, "/data": data}, Addr: "127.154.250.3",
	})

	if code := r.exits(t); code == 0 || !strings.Contains(r.out.String(), "Cannot use this database as it is too new for the server to understand") {
		t.Fatalf("exit %d, output:\n%s", code, r.out)
	}
}

// As the real one: v1.157's database keeps compat 84, which v1.120 (88)
// can read, so Synapse itself does not refuse that downgrade.
func TestSynapseStartsOnNewerSchemaItCanRead(t *testing.T) {
	config, data := synapseHost(t, 94, 84)
	r := start(t, "matrixdotorg/synapse:v1.120.2", &apps.Container{
		Args:   []string{"--config-path=/config/homeserver.yaml", "--config-path=/config/conf.d/"},
		Mounts: map[string]string{"/config": config, "/data": data}, Addr: "127.154.250.4",
	})

	if got := r.get(t, "http://127.154.250.4:8008/health"); got != "OK" {
		t.Fatalf("/health = %q", got)
	}
}

func TestJellyfinRefusesNewerPreviousVersion(t *testing.T) {
	data := t.TempDir()
	write(t, filepath.Join(data, "config", "system.xml"), "<?xml version=\"1.0\"?>\n<ServerConfiguration>\n  <PreviousVersionStr>10.10.7</PreviousVersionStr>\n</ServerConfiguration>\n")

	r := start(t, "jellyfin/jellyfin:10.10.3", &apps.Container{Mounts: map[string]string{"/config": data}, Addr: "127.154.250.5"})

	if code := r.exits(t); code == 0 || !strings.Contains(r.out.String(), "10.10.3") || !strings.Contains(r.out.String(), "10.10.7") {
		t.Fatalf("exit %d, output:\n%s", code, r.out)
	}

	if b, _ := os.ReadFile(filepath.Join(data, "config", "system.xml")); !strings.Contains(string(b), "<PreviousVersionStr>10.10.7<") {
		t.Fatalf("a refused start rewrote system.xml:\n%s", b)
	}
}

func TestJellyfinWritesPreviousVersionAndServesHealth(t *testing.T) {
	data := t.TempDir()
	write(t, filepath.Join(data, "config", "system.xml"), "<?xml version=\"1.0\"?>\n<ServerConfiguration>\n  <PreviousVersionStr>10.10.3</PreviousVersionStr>\n</ServerConfiguration>\n")

	r := start(t, "jellyfin/jellyfin:10.10.7", &apps.Container{
		Env:    map[string]string{"JELLYFIN_DATA_DIR": "/config", "JELLYFIN_CONFIG_DIR": "/config/config"},
		Mounts: map[string]string{"/config": data}, Addr: "127.154.250.6",
	})

	if got := r.get(t, "http://127.154.250.6:8096/health"); got != "Healthy" {
		t.Fatalf("/health = %q", got)
	}

	if b, _ := os.ReadFile(filepath.Join(data, "config", "system.xml")); !strings.Contains(string(b), "<PreviousVersionStr>10.10.7<") {
		t.Fatalf("system.xml after start:\n%s", b)
	}
}

func TestFrigateServesVersion(t *testing.T) {
	config := t.TempDir()
	write(t, filepath.Join(config, "config.yml"), "mqtt:\n  enabled: false\n")

	r := start(t, "ghcr.io/blakeblackshear/frigate:0.14.1", &apps.Container{Mounts: map[string]string{"/config": config}, Addr: "127.154.250.7"})
	if got := r.get(t, "http://127.154.250.7:5000/api/version"); !strings.HasPrefix(got, "0.14.1-") {
		t.Fatalf("/api/version = %q", got)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		image, app string
		command    bool
		err        string
	}{
		{"matrixdotorg/synapse:v1.120.2", "synapse", false, ""},
		{"docker.io/jellyfin/jellyfin:10.10.3@sha256:abcd", "jellyfin", false, ""},
		{"busybox:1.36", "", true, ""},
		{"docker.io/library/alpine:3.20", "", true, ""},
		{"ghcr.io/servercontainers/samba:smbd-only-a3.21.0-s4.20.6-r0", "samba", false, ""},
		{"matrixdotorg/synapse:latest", "synapse", false, `tag "latest" is not a version`},
		{"example.com/nothing:1.0", "", false, "the lab has no stand-in for this image"},
	} {
		im, err := apps.Lookup(tc.image)
		if tc.err == "" && (err != nil || im.App != tc.app || im.Command != tc.command) {
			t.Errorf("Lookup(%s) = %+v, %v", tc.image, im, err)
		}

		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, apps.ErrUnknownImage)) {
			t.Errorf("Lookup(%s) error = %v, want %q", tc.image, err, tc.err)
		}
	}
}

// A file that is not a SQLite database (the lab's busybox-layout old VM
// has one) stops Synapse as it stops the real one.
func TestSynapseRefusesFileNotADatabase(t *testing.T) {
	config, data := synapseHost(t, 84, 83)
	write(t, filepath.Join(data, "homeserver.db"), "SQLite format 3\x00 the rooms\n")

	r := start(t, "matrixdotorg/synapse:v1.120.2", &apps.Container{
		Args:   []string{"--config-path=/config/homeserver.yaml", "--config-path=/config/conf.d/"},
		Mounts: map[string]string{"/config": config, "/data": data}, Addr: "127.154.250.8",
	})

	out := r.out.String
	if code := r.exits(t); code == 0 || !strings.Contains(out(), "database /data/homeserver.db: sqlite3.DatabaseError: file is not a database") || strings.Contains(out(), data) {
		t.Fatalf("exit %d, output:\n%s", code, out())
	}
}
