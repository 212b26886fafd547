package incushost_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/lab/debroot"
	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// debianLab starts a lab whose old VMs are Debian hosts (host.Root is
// filled in from lab/debroot's cache, built when absent).
func debianLab(t *testing.T, host incushost.OldHost) *incusapi.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := debroot.Root(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	host.Root = root
	start := time.Now()
	_, c := lab(t, incushost.Options{Seed: true, OldHost: &host})
	t.Logf("the Debian old VMs seeded and booted in %s", time.Since(start).Round(time.Millisecond))
	return c
}

// vmAddress is the VM's own address, as its /etc/hosts names it.
func vmAddress(t *testing.T, c *incusapi.Client, vm string) string {
	t.Helper()
	code, out, _ := run(t, c, vm, "sh", "-c", "head -n1 /etc/hosts | cut -f1")
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("no address in %s's /etc/hosts", vm)
	}
	return strings.TrimSpace(out)
}

// get waits for url to answer 200 and returns its body.
func get(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
			err = &httpError{resp.Status, string(b)}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type httpError struct{ status, body string }

func (e *httpError) Error() string { return e.status + ": " + e.body }

func TestDebianOldVMs(t *testing.T) {
	c := debianLab(t, incushost.OldHost{SambaPasswords: map[string]string{"ana": "correct horse", "ben": "battery staple"}})

	t.Run("systemctl refuses an unknown unit as systemd does", func(t *testing.T) {
		code, _, stderr := run(t, c, "services", "systemctl", "stop", "frigate")
		if code != 5 || !strings.Contains(stderr, "Failed to stop frigate.service: Unit frigate.service not loaded.") {
			t.Errorf("systemctl stop frigate: exit %d, stderr %q", code, stderr)
		}
		code, out, _ := run(t, c, "services", "systemctl", "is-active", "smbd", "jellyfin")
		if code != 0 || out != "active\nactive\n" {
			t.Errorf("systemctl is-active smbd jellyfin: exit %d, %q", code, out)
			journal(t, c, "services", "smbd.service", "jellyfin.service")
		}
	})
	t.Run("no sqlite3 on the hosts", func(t *testing.T) {
		for _, vm := range []string{"matrix", "services"} {
			if code, out, _ := run(t, c, vm, "sh", "-c", "command -v sqlite3; command -v python3"); code != 0 || strings.Contains(out, "sqlite3") || !strings.Contains(out, "/usr/bin/python3") {
				t.Errorf("%s: command -v sqlite3; command -v python3: exit %d, %q", vm, code, out)
			}
		}
	})
	t.Run("synapse reads conf.d and refuses a config without server_name", func(t *testing.T) {
		python := "/opt/venvs/matrix-synapse/bin/python"
		code, _, stderr := run(t, c, "matrix", "runuser", "-u", "matrix-synapse", "--", python, "-m", "synapse.app.homeserver",
			"--config-path=/etc/matrix-synapse/homeserver.yaml", "--generate-keys")
		if code == 0 || !strings.Contains(stderr, "Missing mandatory `server_name` config option.") {
			t.Errorf("homeserver.yaml alone: exit %d, stderr %q", code, stderr)
		}
		if body := get(t, "http://"+vmAddress(t, c, "matrix")+":8008/_matrix/federation/v1/version"); !strings.Contains(body, `"version": "1.120.2"`) {
			t.Errorf("the running Synapse (from homeserver.yaml and conf.d) answers %s", body)
		}
		code, out, _ := run(t, c, "matrix", "dpkg-query", "-W", "-f=${Version}", "matrix-synapse-py3")
		if code != 0 || out != "1.120.2+bookworm1" {
			t.Errorf("dpkg-query matrix-synapse-py3: exit %d, %q", code, out)
		}
	})
	t.Run("pdbedit lists the Samba users", func(t *testing.T) {
		code, out, _ := run(t, c, "services", "pdbedit", "-L")
		if code != 0 || !strings.Contains(out, "ana:") || !strings.Contains(out, "ben:") {
			t.Errorf("pdbedit -L: exit %d, %q", code, out)
		}
	})
	t.Run("docker compose lists frigate", func(t *testing.T) {
		code, out, _ := run(t, c, "services", "docker", "compose", "ls", "--all", "--format", "json")
		if want := `[{"Name":"frigate","Status":"running(1)","ConfigFiles":"/opt/frigate/docker-compose.yml"}]`; code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("docker compose ls: exit %d, %q; want %s", code, out, want)
		}
		if body := get(t, "http://"+vmAddress(t, c, "services")+":5000/api/version"); body != "0.14.1-lab" {
			t.Errorf("Frigate's /api/version: %q", body)
		}
		code, _, stderr := run(t, c, "services", "docker", "compose", "-p", "nvr", "stop")
		if code != 1 || !strings.Contains(stderr, "no such project: nvr") {
			t.Errorf("docker compose -p nvr stop: exit %d, %q", code, stderr)
		}
	})
	t.Run("jellyfin answers its health check and refuses a newer release's config", func(t *testing.T) {
		if body := get(t, "http://"+vmAddress(t, c, "services")+":8096/health"); body != "Healthy" {
			t.Errorf("Jellyfin's /health: %q", body)
		}
		if code, out, _ := run(t, c, "services", "cat", "/etc/jellyfin/encoding.xml"); code != 0 || !strings.Contains(out, "<HardwareAccelerationType>none</HardwareAccelerationType>") {
			t.Errorf("hardware decoding is not off by default: %s", out)
		}
		code, _, stderr := run(t, c, "services", "sh", "-c", `sed -i 's|<PreviousVersionStr>.*<|<PreviousVersionStr>10.11.0<|' /etc/jellyfin/system.xml && systemctl restart jellyfin`)
		_, journal, _ := run(t, c, "services", "tail", "-n3", "/var/log/lab-journal/jellyfin.service.log")
		if code == 0 || !strings.Contains(stderr, "Failed to start jellyfin.service") || !strings.Contains(journal, "Jellyfin 10.10.7 cannot use the configuration and database of Jellyfin 10.11.0") {
			t.Errorf("Jellyfin 10.10.7 on a 10.11.0 config: exit %d, %q, journal %q", code, stderr, journal)
		}
		if code, _, stderr := run(t, c, "services", "sh", "-c", `sed -i 's|<PreviousVersionStr>.*<|<PreviousVersionStr>10.10.7<|' /etc/jellyfin/system.xml && systemctl start jellyfin`); code != 0 {
			t.Errorf("Jellyfin back on its own config: exit %d, %s", code, stderr)
		}
	})
	// A VM stopped and started again boots its enabled units, not what
	// was stopped by hand: Frigate stopped through Compose stays stopped
	// (restart: unless-stopped), as on a real host.
	t.Run("a restarted VM boots its services", func(t *testing.T) {
		if code, _, stderr := run(t, c, "services", "docker", "compose", "-p", "frigate", "stop"); code != 0 {
			t.Fatalf("docker compose -p frigate stop: %s", stderr)
		}
		for _, action := range []string{"stop", "start"} {
			if err := c.SetState(ctxT(t), "services", incusapi.InstanceStatePut{Action: action, Timeout: 30}); err != nil {
				t.Fatalf("%s services: %v", action, err)
			}
		}
		code, out, _ := run(t, c, "services", "systemctl", "is-active", "smbd", "jellyfin")
		if code != 0 || out != "active\nactive\n" {
			t.Errorf("after a restart, systemctl is-active smbd jellyfin: exit %d, %q", code, out)
		}
		if _, out, _ := run(t, c, "services", "docker", "compose", "ls", "--all", "--format", "json"); !strings.Contains(out, `"Status":"exited(1)"`) {
			t.Errorf("after a restart, Frigate stopped by hand runs again: %s", out)
		}
		// Compose finds the project by the working directory's file too.
		code, out, stderr := run(t, c, "services", "sh", "-c", "cd /opt/frigate && docker compose start && docker ps --format json")
		if code != 0 || !strings.Contains(out, `"Names": "frigate"`) || !strings.Contains(out, `"State": "running"`) {
			t.Errorf("cd /opt/frigate && docker compose start: exit %d, %q %s", code, out, stderr)
		}
	})
}

// The variants: Synapse on PostgreSQL, hardware decoding on, and apps
// newer than the example's images.
func TestDebianHostVariants(t *testing.T) {
	c := debianLab(t, incushost.OldHost{SynapseDB: "psycopg2", HWAccel: true, JellyfinVersion: "10.11.2", FrigateVersion: "0.15.1", SynapseVersion: "1.130.0"})
	for _, check := range []struct{ vm, cmd, want string }{
		{"services", "dpkg-query -W -f='${Version}' jellyfin-server", "10.11.2+deb12"},
		{"services", "grep -c 'vaapi\\|renderD128' /etc/jellyfin/encoding.xml", "2"},
		{"services", "grep -h 'image:\\|hwaccel' /opt/frigate/docker-compose.yml /opt/frigate/config/config.yml", "image: ghcr.io/blakeblackshear/frigate:0.15.1\n  hwaccel_args: preset-vaapi"},
		{"matrix", "dpkg-query -W -f='${Version}' matrix-synapse-py3", "1.130.0+bookworm1"},
		{"matrix", "systemctl is-active postgresql@15-main matrix-synapse", "active\nactive"},
		// postgresql.service carries the clusters (their PartOf=, the generator's wants)
		{"matrix", "systemctl stop postgresql; systemctl is-active postgresql@15-main; systemctl start postgresql; systemctl is-active postgresql@15-main", "inactive\nactive"},
	} {
		if code, out, stderr := run(t, c, check.vm, "sh", "-c", check.cmd); code != 0 || strings.TrimSpace(out) != check.want {
			t.Errorf("%s: %s: exit %d, %q (%s); want %q", check.vm, check.cmd, code, out, stderr, check.want)
		}
	}
	code, out, stderr := run(t, c, "matrix", "runuser", "-u", "postgres", "--", "psql", "-tA", "-c", "SELECT version FROM schema_version", "synapse")
	if code != 0 || strings.TrimSpace(out) != "92" { // Synapse 1.130's SCHEMA_VERSION
		t.Fatalf("the synapse database's schema_version: exit %d, %q %s", code, out, stderr)
	}
	if body := get(t, "http://"+vmAddress(t, c, "matrix")+":8008/_matrix/client/versions"); !strings.Contains(body, `"versions"`) {
		t.Errorf("Synapse on PostgreSQL answers %s", body)
	}
	// What a move runs there: Synapse stopped, its database dumped by
	// Debian's pg_dump, Synapse started again.
	code, out, stderr = run(t, c, "matrix", "sh", "-c", `systemctl stop matrix-synapse && systemctl is-active matrix-synapse;
		runuser -u postgres -- pg_dump --format=custom --no-owner synapse | head -c 5; systemctl start matrix-synapse && systemctl is-active matrix-synapse`)
	if code != 0 || out != "inactive\nPGDMPactive\n" {
		t.Errorf("stop, pg_dump, start: exit %d, %q, %s", code, out, stderr)
	}
	// Restarted, the VM boots its cluster, then Synapse (the admin's
	// drop-in orders it After=postgresql.service): Synapse never meets a
	// database that is not up. The last boot's PostgreSQL was killed, its
	// pid files left naming a live process (what a snapshot taken while
	// it ran holds too): /run starts empty, as the tmpfs it is, so the
	// new boot's cluster is not mistaken for running.
	failures := "grep -c 'Failed to prepare database' /var/log/lab-journal/matrix-synapse.service.log"
	_, before, _ := run(t, c, "matrix", "sh", "-c", failures)
	if code, _, stderr := run(t, c, "matrix", "sh", "-c", `kill -9 $(head -n1 /var/lib/postgresql/15/main/postmaster.pid) && echo 1 > /run/postgresql/15-main.pid`); code != 0 {
		t.Fatalf("killing PostgreSQL: %s", stderr)
	}
	for _, action := range []string{"stop", "start"} {
		if err := c.SetState(ctxT(t), "matrix", incusapi.InstanceStatePut{Action: action, Timeout: 30}); err != nil {
			t.Fatalf("%s matrix: %v", action, err)
		}
	}
	if body := get(t, "http://"+vmAddress(t, c, "matrix")+":8008/_matrix/client/versions"); !strings.Contains(body, `"versions"`) {
		t.Errorf("Synapse on PostgreSQL after a restart answers %s", body)
	}
	if _, after, _ := run(t, c, "matrix", "sh", "-c", failures); after != before {
		t.Errorf("Synapse started before PostgreSQL at boot: %s failed database starts, %s before the restart", strings.TrimSpace(after), strings.TrimSpace(before))
		journal(t, c, "matrix", "matrix-synapse.service", "postgresql@15-main.service")
	}
	time.Sleep(3 * time.Second) // what appmoves saw: PostgreSQL gone a few seconds after the boot
	if code, out, _ := run(t, c, "matrix", "sh", "-c", "pg_isready -q && systemctl is-active postgresql@15-main && cat /run/postgresql/15-main.pid"); code != 0 || strings.HasSuffix(out, "\n1\n") {
		t.Errorf("PostgreSQL after the restart: exit %d, %q", code, out)
		journal(t, c, "matrix", "postgresql@15-main.service")
	}
}

// journal logs what the units wrote (the lab's systemctl keeps it in
// /var/log/lab-journal), to tell why one is not running.
func journal(t *testing.T, c *incusapi.Client, vm string, units ...string) {
	t.Helper()
	for _, u := range units {
		_, out, _ := run(t, c, vm, "sh", "-c", "systemctl status "+u+"; tail -n 20 /var/log/lab-journal/"+u+".log")
		t.Logf("%s in %s:\n%s", u, vm, out)
	}
}

// TestDebianFrigateService: the variant whose Frigate is a unit of its
// own (frigate.service running its container with docker run, no
// Compose project): it boots with the VM, `systemctl stop|start frigate`
// stops and starts it, and Compose knows no frigate project.
func TestDebianFrigateService(t *testing.T) {
	c := debianLab(t, incushost.OldHost{FrigateService: true})
	api := "http://" + vmAddress(t, c, "services") + ":5000/api/version"
	if body := get(t, api); !strings.HasPrefix(body, incushost.DefaultFrigateVersion) {
		t.Fatalf("Frigate booted by frigate.service answers %q", body)
	}
	if _, out, _ := run(t, c, "services", "docker", "compose", "ls", "--all", "--format", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("docker compose ls: %q, want no project", out)
	}
	code, out, stderr := run(t, c, "services", "sh", "-c", "systemctl stop frigate && systemctl is-active frigate; docker ps --format json")
	if code != 0 || out != "inactive\n" {
		t.Errorf("systemctl stop frigate: exit %d, %q %s", code, out, stderr)
		journal(t, c, "services", "frigate.service")
	}
	if resp, err := http.Get(api); err == nil {
		resp.Body.Close()
		t.Errorf("Frigate still answers once its unit is stopped")
	}
	if code, out, stderr := run(t, c, "services", "sh", "-c", "systemctl start frigate && systemctl is-active frigate"); code != 0 || out != "active\n" {
		t.Errorf("systemctl start frigate: exit %d, %q %s", code, out, stderr)
		journal(t, c, "services", "frigate.service")
	}
	if body := get(t, api); !strings.HasPrefix(body, incushost.DefaultFrigateVersion) {
		t.Errorf("Frigate started again answers %q", body)
	}
}
