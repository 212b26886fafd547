package inventory_test

import (
	"errors"
	iofs "io/fs"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/inventory"
	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// debianFiles lay the old VMs out as Debian 12 hosts have them (Synapse
// of matrix-synapse-py3 on PostgreSQL with conf.d, Jellyfin's packages,
// Frigate in Compose, Debian's samba): the programs init asks are
// stand-ins answering as Debian's do.
var debianFiles = map[string]map[string]string{
	"matrix": {
		"/etc/matrix-synapse/homeserver.yaml":            "pid_file: /var/run/matrix-synapse.pid\nlisteners:\n  - port: 8008\n    type: http\ndatabase:\n  name: psycopg2\n  args:\n    user: synapse_user\n    password: a-password-init-never-reads\n    database: synapse\n    host: localhost\n",
		"/etc/matrix-synapse/conf.d/server_name.yaml":    "server_name: example.org\n",
		"/etc/matrix-synapse/conf.d/report_stats.yaml":   "report_stats: false\n",
		"/opt/venvs/matrix-synapse/bin/python":           "#!/bin/sh\nexit 0\n",
		"/usr/local/bin/dpkg-query":                      "#!/bin/sh\ncase \"$3\" in matrix-synapse-py3) printf 1.120.2+bookworm1 ;; *) echo \"dpkg-query: no packages found matching $3\" >&2; exit 1 ;; esac\n",
		"/usr/local/bin/sqlite3":                         "", // Debian only suggests it: removed below
		"/etc/matrix-synapse/conf.d/not-yaml.txt":        "ignored: Synapse reads *.yaml only\n",
		"/etc/matrix-synapse/conf.d/zz-media_store.yaml": "media_store_path: /srv/synapse-media\n",
	},
	"services": {
		"/etc/default/jellyfin":      "JELLYFIN_DATA_DIR=\"/var/lib/jellyfin\"\nJELLYFIN_CONFIG_DIR=\"/etc/jellyfin\"\nJELLYFIN_CACHE_DIR=\"/var/cache/jellyfin\"\n",
		"/etc/jellyfin/encoding.xml": "<?xml version=\"1.0\"?>\n<EncodingOptions>\n  <HardwareAccelerationType>none</HardwareAccelerationType>\n</EncodingOptions>\n",
		"/usr/local/bin/dpkg-query":  "#!/bin/sh\ncase \"$3\" in jellyfin-server) printf 10.10.7+deb12 ;; samba) printf 2:4.17.12+dfsg-0+deb12u1 ;; *) exit 1 ;; esac\n",
		"/usr/local/bin/docker":      "#!/bin/sh\n[ \"$*\" = 'compose ls --all --format json' ] || exit 1\necho '[{\"Name\":\"frigate\",\"Status\":\"running(1)\",\"ConfigFiles\":\"/opt/frigate/docker-compose.yml\"}]'\n",
		"/usr/local/bin/pdbedit":     "#!/bin/sh\n[ \"$*\" = -L ] || exit 1\necho 'ana:1000:Ana'\necho 'ben:1001:'\n",
		"/usr/local/bin/python3":     "#!/bin/sh\nexit 1\n", // a python3 that reads nothing: init must not need one
		"/etc/samba/smb.conf":        "[global]\n   workgroup = HOME\n   include = /etc/samba/shares.conf\n\n[media]\n   path = /var/mnt/data/media\n",
		"/etc/samba/shares.conf":     "[photos]\n   path = /var/mnt/data/photos\n",
	},
}

// jellyfinDB is a jellyfin.db as a running Jellyfin leaves it, made by
// the real SQLite (this machine's python3): table Users as EF Core
// creates it, in WAL mode, ana in the file and ben only in the
// write-ahead log (not yet checkpointed).
func jellyfinDB(t *testing.T) (db, wal string) {
	t.Helper()
	dir := t.TempDir()
	py := `import shutil, sqlite3, sys
src, dst = sys.argv[1], sys.argv[2]
c = sqlite3.connect(src, isolation_level=None)
c.executescript("""PRAGMA journal_mode=WAL;
CREATE TABLE "Users" ("Id" TEXT NOT NULL CONSTRAINT "PK_Users" PRIMARY KEY, "Username" TEXT NOT NULL COLLATE NOCASE, "Password" TEXT NULL);
INSERT INTO Users VALUES ('4b7c', 'ana', '$PBKDF2$a-hash');
PRAGMA wal_checkpoint(TRUNCATE); PRAGMA wal_autocheckpoint=0;
INSERT INTO Users VALUES ('9e1f', 'ben', NULL);""")
shutil.copy(src, dst)
shutil.copy(src + "-wal", dst + "-wal")
`
	dst := filepath.Join(dir, "copy.db")
	if out, err := exec.Command("python3", "-c", py, filepath.Join(dir, "jellyfin.db"), dst).CombinedOutput(); err != nil {
		t.Fatalf("python3's sqlite3: %v\n%s", err, out)
	}
	d, err1 := os.ReadFile(dst)
	w, err2 := os.ReadFile(dst + "-wal")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	return string(d), string(w)
}

func pushFiles(t *testing.T, c *incusapi.Client, files map[string]map[string]string) {
	t.Helper()
	for vm, byPath := range files {
		for p, body := range byPath {
			if body == "" {
				if err := c.DeleteFile(t.Context(), vm, p); err != nil && !incusapi.IsNotFound(err) {
					t.Fatal(err)
				}
				continue
			}
			var parents []string
			for d := path.Dir(p); d != "/"; d = path.Dir(d) {
				parents = append([]string{d}, parents...)
			}
			for _, d := range parents {
				_ = c.PushFile(t.Context(), vm, d, incusapi.FilePut{Type: "directory", Mode: 0o755}) // one that exists stays
			}
			mode := 0o644
			if strings.HasPrefix(body, "#!") {
				mode = 0o755
			}
			if err := c.PushFile(t.Context(), vm, p, incusapi.FilePut{Mode: iofs.FileMode(mode), Content: strings.NewReader(body)}); err != nil {
				t.Fatalf("%s:%s: %v", vm, p, err)
			}
		}
	}
}

// TestReadAppsAsInstalled: init reads each app as its install has it:
// the kind, the version, every config file (Synapse's conf.d, Samba's
// include), the database (Synapse on PostgreSQL, without its password),
// the library and share paths, the users' names, the hardware decoding;
// through read-only commands only, and the findings say what the move
// does about each.
func TestReadAppsAsInstalled(t *testing.T) {
	h, c, rec := labHost(t)
	pushFiles(t, c, debianFiles)
	db, wal := jellyfinDB(t)
	pushFiles(t, c, map[string]map[string]string{"services": {"/var/lib/jellyfin/data/jellyfin.db": db, "/var/lib/jellyfin/data/jellyfin.db-wal": wal}})
	eventsBefore, err := home.ReadEvents(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	rec.calls = nil
	host, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	checkReadOnly(t, rec.calls)
	ev, _ := home.ReadEvents(h.Dir())
	checkReadOnlyCommands(t, ev[len(eventsBefore):])

	facts := map[string]*inventory.AppFacts{}
	for _, i := range host.Instances {
		for _, a := range i.Apps {
			facts[a.Name] = a.Facts
		}
	}
	syn := facts["Synapse"]
	if syn == nil || syn.Kind != inventory.KindDebian || syn.Package != "matrix-synapse-py3" || syn.Version != "1.120.2+bookworm1" {
		t.Fatalf("Synapse's install: %+v", syn)
	}
	if want := []string{"/etc/matrix-synapse/homeserver.yaml", "/etc/matrix-synapse/conf.d/report_stats.yaml", "/etc/matrix-synapse/conf.d/server_name.yaml", "/etc/matrix-synapse/conf.d/zz-media_store.yaml"}; !slices.Equal(syn.ConfigFiles, want) {
		t.Errorf("Synapse's config files: %q, want %q", syn.ConfigFiles, want)
	}
	if d := syn.Database; d == nil || *d != (inventory.Database{Engine: inventory.EnginePostgreSQL, Name: "synapse", Host: "localhost"}) {
		t.Errorf("Synapse's database: %+v", d)
	}
	// (Whether the VM has sqlite3 is the lab's: its old VMs see the
	// host's /usr. TestAppFindings judges a VM without.)
	if !slices.Contains(syn.DataPaths, "/srv/synapse-media") || !slices.Contains(syn.Tools, "/opt/venvs/matrix-synapse/bin/python") {
		t.Errorf("Synapse's data paths or tools: %q %q", syn.DataPaths, syn.Tools)
	}
	jf := facts["Jellyfin"]
	if jf == nil || jf.Kind != inventory.KindDebian || jf.Version != "10.10.7+deb12" || jf.HWAccel != "" ||
		jf.Database == nil || jf.Database.Path != "/var/lib/jellyfin/data/jellyfin.db" ||
		!slices.Equal(jf.LibraryPaths, []string{"/var/mnt/data/media/movies"}) || !slices.Equal(jf.Users, []string{"ana", "ben"}) ||
		!slices.Contains(jf.ConfigFiles, "/etc/jellyfin/system.xml") || !slices.Contains(jf.ConfigFiles, "/etc/default/jellyfin") {
		t.Errorf("Jellyfin's install: %+v", jf)
	}
	fr := facts["Frigate"]
	if fr == nil || fr.Kind != inventory.KindCompose || fr.Package != "frigate" || fr.Version != "0.14.1" || fr.HWAccel != "preset-vaapi" ||
		fr.Database == nil || fr.Database.Path != "/opt/frigate/config/frigate.db" || !slices.Contains(fr.DataPaths, "/var/mnt/data/frigate") {
		t.Errorf("Frigate's install: %+v", fr)
	}
	sm := facts["Samba"]
	if sm == nil || sm.Version != "2:4.17.12+dfsg-0+deb12u1" || !slices.Equal(sm.Users, []string{"ana", "ben"}) ||
		!slices.Equal(sm.LibraryPaths, []string{"/var/mnt/data/media", "/var/mnt/data/photos"}) || !slices.Equal(sm.ConfigFiles, []string{"/etc/samba/smb.conf", "/etc/samba/shares.conf"}) {
		t.Errorf("Samba's install: %+v", sm)
	}

	site, guesses, err := inventory.Choose(tmpl(t), host, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if site.MatrixDomain != "example.org" {
		t.Errorf("server_name from conf.d: %q", site.MatrixDomain)
	}
	fs := append(guesses, inventory.Check(host, site)...)
	for code, want := range map[string]string{
		inventory.CodeSynapsePostgres: "pg_dump",
		inventory.CodeHWAccelOff:      "/dev/dri/renderD128",
		inventory.CodeCompose:         "docker compose",
	} {
		got := findingsOf(fs, code)
		if len(got) != 1 || !strings.Contains(got[0].Seen+" "+got[0].Do, want) {
			t.Errorf("finding %s: %+v, want one saying %q", code, got, want)
		}
	}
	for _, f := range fs {
		if strings.Contains(f.Seen+f.Do, "a-password-init-never-reads") {
			t.Errorf("a finding quotes Synapse's database password: %+v", f)
		}
	}
}

// checkReadOnly: what init may send: reads, and the read-only commands
// through exec, whose output files it deletes once read.
func checkReadOnly(t *testing.T, calls []string) {
	t.Helper()
	for _, call := range calls {
		m, p, _ := strings.Cut(call, " ")
		switch {
		case m == http.MethodGet || m == http.MethodHead:
		case m == http.MethodPost && strings.HasSuffix(p, "/exec"):
		case m == http.MethodDelete && strings.Contains(p, "/logs/exec-output/exec_"):
		default:
			t.Errorf("the inventory sent %s: it must only read", call)
		}
	}
}

// checkReadOnlyCommands: the commands run are those inventory/doc.go
// says init runs, none that writes.
func checkReadOnlyCommands(t *testing.T, events []home.Event) {
	t.Helper()
	allowed := []string{"dpkg-query -W -f=${Version} ", "docker compose ls --all --format json", "pdbedit -L", "sh -c command -v sqlite3; command -v python3"}
	for _, e := range events {
		line := strings.Join(e.Command, " ")
		if !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(line, p) }) {
			t.Errorf("the inventory ran %q in %s: not one of doc.go's read-only commands", e.Command, e.Instance)
		}
	}
}

// TestReadIncusOSPhysicalLAN: the lab host as IncusOS after its
// direct-attach tutorial lists the LAN as a managed physical network;
// init reads it and takes it as the NICs' network.
func TestReadIncusOSPhysicalLAN(t *testing.T) {
	h, err := home.Start(t.Context(), home.Options{Dir: path.Join(t.TempDir(), "lab"), AddressBlock: 32, LANPhysical: "enp5s0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	opts, err := incusapi.RemoteOptions(h.ClientConfig(), home.Remote)
	if err != nil {
		t.Fatal(err)
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	host, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	site, guesses, err := inventory.Choose(tmpl(t), host, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if site.LANNetwork != "enp5s0" {
		t.Errorf("the LAN network: %q in %+v", site.LANNetwork, host.Networks)
	}
	if nb := findingsOf(append(guesses, inventory.Check(host, site)...), inventory.CodeNoLANBridge); len(nb) != 0 {
		t.Errorf("a false no-lan-bridge blocker: %+v", nb)
	}
}

// TestFrigateComposeElsewhere: a Compose project of Frigate outside
// /opt/frigate is found through Compose, and read from its own file:
// the project's name, the image's tag, its config and recordings as its
// volumes map them.
func TestFrigateComposeElsewhere(t *testing.T) {
	_, c, _ := labHost(t)
	for _, p := range []string{"/opt/frigate/config/config.yml", "/opt/frigate/docker-compose.yml"} {
		if err := c.DeleteFile(t.Context(), "services", p); err != nil && !incusapi.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	pushFiles(t, c, map[string]map[string]string{"services": {
		"/srv/nvr/compose.yaml":     "services:\n  nvr:\n    image: ghcr.io/blakeblackshear/frigate:0.14.2\n    volumes:\n      - ./cfg:/config\n      - /var/mnt/data/nvr:/media/frigate\n",
		"/srv/nvr/cfg/config.yml":   "database:\n  path: /config/db/frigate.db\nffmpeg:\n  hwaccel_args: preset-vaapi\n",
		"/usr/local/bin/docker":     "#!/bin/sh\necho '[{\"Name\":\"nvr\",\"Status\":\"running(1)\",\"ConfigFiles\":\"/srv/nvr/compose.yaml\"}]'\n",
		"/usr/local/bin/dpkg-query": "#!/bin/sh\nexit 1\n",
	}})
	host, err := inventory.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	var fr *inventory.App
	for _, a := range host.Instance("services").Apps {
		if a.Name == "Frigate" {
			fr = &a
		}
	}
	if fr == nil || fr.Evidence != "/srv/nvr/compose.yaml" || fr.Facts.Kind != inventory.KindCompose || fr.Facts.Package != "nvr" || fr.Facts.Version != "0.14.2" ||
		fr.Facts.Database.Path != "/srv/nvr/cfg/db/frigate.db" || !slices.Equal(fr.Facts.DataPaths, []string{"/srv/nvr/cfg", "/var/mnt/data/nvr"}) ||
		fr.HWAccel != "preset-vaapi (/srv/nvr/cfg/config.yml)" {
		t.Errorf("Frigate in /srv/nvr: %+v %+v", fr, fr.Facts)
	}
}
