package incushost

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// MatrixDomain is the Synapse server_name of the old matrix VM (the
// example's matrix_domain).
const MatrixDomain = "matrix.example.org"

// servicesLayout: Debian's samba with two users and the data volume's
// shares; Jellyfin as its Debian packages install it; Frigate as a
// Docker Compose project in /opt/frigate (or its own frigate.service).
func servicesLayout(l *layout, h *OldHost, addr string) {
	l.enabled = []string{"smbd.service", "nmbd.service", "jellyfin.service"}
	if h.FrigateService {
		l.enabled = append(l.enabled, "frigate.service")
	}
	l.file("/usr/bin/docker", 0o755, "", standIn("docker"))
	sambaLayout(l, h, addr)
	jellyfinLayout(l, h)
	frigateLayout(l, h)
}

func sambaLayout(l *layout, h *OldHost, addr string) {
	l.file("/etc/samba/smb.conf", 0o644, "", `[global]
   workgroup = HOME
   server string = %h server (Samba, Debian)
   server role = standalone server
   # The lab's VMs share the host's network: smbd binds its own address
   # only (a /8: Samba takes a bare address only when an interface has it).
   interfaces = `+addr+`/8
   bind interfaces only = yes
   # The lab's sandbox cannot bind ports below 1024 (its user namespace
   # does not own the network): SMB on 1445, and no NetBIOS (nmbd).
   smb ports = 1445
   disable netbios = yes
   passdb backend = tdbsam
   map to guest = bad user
   log file = /var/log/samba/log.%m
   max log size = 1000
   logging = file
   usershare allow guests = yes

[media]
   path = /var/mnt/data/media
   read only = no
   valid users = `+strings.Join(slices.Sorted(maps.Keys(h.SambaPasswords)), " ")+`

[files]
   path = /var/mnt/data/files
   read only = no

[photos]
   path = /var/mnt/data/photos
   read only = yes
   guest ok = yes
`)
	for _, user := range slices.Sorted(maps.Keys(h.SambaPasswords)) {
		pw := h.SambaPasswords[user]
		// As an admin adds a Samba user: a Unix account, then smbpasswd
		// reading the password twice on stdin (never in argv).
		l.sh("the Samba user "+user, `id -u `+user+` >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin `+user+`
smbpasswd -a -s `+user+` >/dev/null`, pw+"\n"+pw+"\n")
	}
	l.sh("the shares' directories", "mkdir -p /var/mnt/data/media/movies /var/mnt/data/files /var/mnt/data/photos /var/mnt/data/frigate", "")
}

func jellyfinLayout(l *layout, h *OldHost) {
	l.users = append(l.users, "jellyfin")
	hw := "<HardwareAccelerationType>none</HardwareAccelerationType>"
	if h.HWAccel {
		hw = "<HardwareAccelerationType>vaapi</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>"
	}
	const head = `<?xml version="1.0" encoding="utf-8"?>` + "\n"
	const ns = ` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema"`
	l.file("/etc/default/jellyfin", 0o644, "", jellyfinDefaults)
	l.file("/etc/jellyfin/system.xml", 0o644, "jellyfin", head+"<ServerConfiguration"+ns+">\n  <IsStartupWizardCompleted>true</IsStartupWizardCompleted>\n  <PreviousVersionStr>"+h.JellyfinVersion+"</PreviousVersionStr>\n  <ServerName>home</ServerName>\n  <EnableMetrics>false</EnableMetrics>\n</ServerConfiguration>\n")
	l.file("/etc/jellyfin/encoding.xml", 0o644, "jellyfin", head+"<EncodingOptions"+ns+">\n  "+hw+"\n</EncodingOptions>\n")
	l.file("/etc/jellyfin/network.xml", 0o644, "jellyfin", head+"<NetworkConfiguration"+ns+">\n  <InternalHttpPort>8096</InternalHttpPort>\n</NetworkConfiguration>\n")
	l.file("/etc/jellyfin/logging.json", 0o644, "", "{\n  \"Serilog\": {\n    \"MinimumLevel\": \"Information\"\n  }\n}\n")
	l.file("/var/lib/jellyfin/root/default/Movies/options.xml", 0o644, "jellyfin", head+"<LibraryOptions>\n  <PathInfos>\n    <MediaPathInfo>\n      <Path>/var/mnt/data/media/movies</Path>\n    </MediaPathInfo>\n  </PathInfos>\n</LibraryOptions>\n")
	l.file("/var/lib/jellyfin/metadata/library/ab/abcdef/poster.jpg", 0o644, "jellyfin", "a poster\n")
	l.file("/usr/lib/jellyfin/bin/jellyfin", 0o755, "", strings.ReplaceAll(standIn("jellyfin"), "@VERSION@", h.JellyfinVersion))
	l.symlink("/usr/bin/jellyfin", "/usr/lib/jellyfin/bin/jellyfin")
	l.file("/lib/systemd/system/jellyfin.service", 0o644, "", jellyfinUnit)
	// The databases Jellyfin 10.10 keeps: real SQLite, made by Python's
	// sqlite3 module (no sqlite3 program on the host).
	l.sh("Jellyfin's databases", `mkdir -p /var/lib/jellyfin/data /var/cache/jellyfin /var/log/jellyfin
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/var/lib/jellyfin/data/jellyfin.db")
db.execute("CREATE TABLE IF NOT EXISTS Users (Id TEXT NOT NULL PRIMARY KEY, Username TEXT NOT NULL, MustUpdatePassword INTEGER NOT NULL DEFAULT 0)")
db.executemany("INSERT OR IGNORE INTO Users (Id, Username) VALUES (?, ?)", [("a1", "ana"), ("b2", "ben")])
db.commit()
lib = sqlite3.connect("/var/lib/jellyfin/data/library.db")
lib.execute("CREATE TABLE IF NOT EXISTS TypedBaseItems (guid GUID PRIMARY KEY, type TEXT NOT NULL, Path TEXT)")
lib.execute("INSERT OR IGNORE INTO TypedBaseItems VALUES (x'00', 'MediaBrowser.Controller.Entities.Movies.Movie', '/var/mnt/data/media/movies/Night of the Lab (1968).mkv')")
lib.commit()
PY
chown -R jellyfin:jellyfin /var/lib/jellyfin /var/cache/jellyfin /var/log/jellyfin /etc/jellyfin`, "")
	version := h.JellyfinVersion + "+deb12"
	l.dpkgStatus("jellyfin-server", version, "Jellyfin is the Free Software Media System.", "/usr/lib/jellyfin/bin/jellyfin", "/lib/systemd/system/jellyfin.service", "/etc/default/jellyfin")
	l.dpkgStatus("jellyfin", version, "Jellyfin is the Free Software Media System (metapackage).")
}

func frigateLayout(l *layout, h *OldHost) {
	image := "ghcr.io/blakeblackshear/frigate:" + h.FrigateVersion
	devices, hwaccel := "", ""
	if h.HWAccel {
		devices = "    devices:\n      - /dev/dri/renderD128:/dev/dri/renderD128\n"
		hwaccel = "ffmpeg:\n  hwaccel_args: preset-vaapi\n"
	}
	if h.FrigateService {
		frigateUnit(l, image, devices != "")
	} else {
		frigateCompose(l, image, devices)
	}
	l.file("/opt/frigate/config/config.yml", 0o644, "", "mqtt:\n  enabled: false\n"+hwaccel+`cameras:
  driveway:
    ffmpeg:
      inputs:
        - path: rtsp://192.168.1.60:554/stream1
          roles: [detect, record]
    detect:
      width: 1280
      height: 720
record:
  enabled: true
  retain:
    days: 7
`)
	l.file("/usr/lib/lab-docker/images/frigate", 0o755, "", standIn("frigate"))
	l.sh("Frigate's database", `python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/opt/frigate/config/frigate.db")
db.execute("CREATE TABLE IF NOT EXISTS event (id VARCHAR(30) NOT NULL PRIMARY KEY, label VARCHAR(20) NOT NULL, camera VARCHAR(20) NOT NULL, start_time DATETIME NOT NULL)")
db.execute("INSERT OR IGNORE INTO event VALUES ('1700000000.0-lab', 'car', 'driveway', 1700000000.0)")
db.commit()
PY`, "")
}

// frigateUnit: Frigate as a unit of its own, the pattern of a container
// run by systemd rather than by Compose (the same /opt/frigate/config).
func frigateUnit(l *layout, image string, device bool) {
	dev := ""
	if device {
		dev = " --device /dev/dri/renderD128"
	}
	l.file("/etc/systemd/system/frigate.service", 0o644, "", `[Unit]
Description=Frigate NVR
After=network-online.target
Wants=network-online.target

[Service]
Restart=on-failure
RestartSec=10
TimeoutStartSec=0
ExecStartPre=-/usr/bin/docker rm -f frigate
ExecStart=/usr/bin/docker run --rm --name frigate --privileged --shm-size=512m`+dev+` -v /etc/localtime:/etc/localtime:ro -v /opt/frigate/config:/config -v /var/mnt/data/frigate:/media/frigate -p 5000:5000 -p 8554:8554 `+image+`
ExecStop=/usr/bin/docker stop frigate

[Install]
WantedBy=multi-user.target
`)
}

// frigateCompose: Frigate's documented install, a Compose project in
// /opt/frigate, as `docker compose up -d` left it.
func frigateCompose(l *layout, image, devices string) {
	l.file("/opt/frigate/docker-compose.yml", 0o644, "", `services:
  frigate:
    container_name: frigate
    privileged: true
    restart: unless-stopped
    image: `+image+`
    shm_size: "512mb"
`+devices+`    volumes:
      - /etc/localtime:/etc/localtime:ro
      - ./config:/config
      - /var/mnt/data/frigate:/media/frigate
      - type: tmpfs
        target: /tmp/cache
        tmpfs:
          size: 1000000000
    ports:
      - "5000:5000"
      - "8971:8971"
      - "8554:8554"
`)
	l.file("/var/lib/docker/lab-containers/frigate.json", 0o600, "", fmt.Sprintf(`{
  "id": "f1a2e3c4d5b6a7f8e9d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2",
  "name": "frigate",
  "image": %q,
  "restart": "unless-stopped",
  "volumes": ["./config:/config", "/var/mnt/data/frigate:/media/frigate"],
  "labels": {
    "com.docker.compose.project": "frigate",
    "com.docker.compose.service": "frigate",
    "com.docker.compose.project.working_dir": "/opt/frigate",
    "com.docker.compose.project.config_files": "/opt/frigate/docker-compose.yml"
  }
}
`, image))
}

// matrixLayout: Synapse as element-hq's Debian package installs it
// (matrix-synapse-py3: a venv in /opt/venvs/matrix-synapse, the
// configuration split into homeserver.yaml and conf.d), on SQLite or on
// Debian's PostgreSQL 15.
func matrixLayout(l *layout, h *OldHost, addr string) {
	l.users = append(l.users, "matrix-synapse")
	l.enabled = []string{"matrix-synapse.service"}
	database := "database:\n  name: sqlite3\n  args:\n    database: /var/lib/matrix-synapse/homeserver.db\n"
	mode := os.FileMode(0o644)
	if h.SynapseDB == "psycopg2" {
		pw := randomSecret()
		// postgresql-common's systemd generator makes each cluster a want
		// of postgresql.service at each boot; the lab writes that want.
		l.enabled = append(l.enabled, "postgresql.service")
		l.symlink("/run/systemd/generator/postgresql.service.wants/postgresql@15-main.service", "/lib/systemd/system/postgresql@.service")
		database = "database:\n  name: psycopg2\n  args:\n    user: synapse_user\n    password: \"" + pw + "\"\n    database: synapse\n    host: localhost\n    cp_min: 5\n    cp_max: 10\n"
		mode = 0o640 // it holds the database's password
		postgresLayout(l, addr, pw)
		// What an admin adds beside the package's unit (which orders
		// after network.target only): Synapse after its database at boot.
		l.file("/etc/systemd/system/matrix-synapse.service.d/postgresql.conf", 0o644, "", "[Unit]\nWants=postgresql.service\nAfter=postgresql.service\n")
	}
	l.file("/etc/matrix-synapse/homeserver.yaml", mode, "matrix-synapse", `# Configuration file for Synapse.
#
# This is a YAML file: see [1] for a quick introduction. Note in particular
# that *indentation is important*: all the elements of a list or dictionary
# should have the same indentation.
#
# [1] https://docs.ansible.com/ansible/latest/reference_appendices/YAMLSyntax.html
#
# For more information on how to configure Synapse, including a complete accounting of
# each option, go to docs/usage/configuration/config_documentation.md or
# https://element-hq.github.io/synapse/latest/usage/configuration/config_documentation.html
#
# This is set in /etc/matrix-synapse/conf.d/server_name.yaml for Debian installations.
# server_name: "SERVERNAME"
pid_file: "/var/run/matrix-synapse.pid"
listeners:
  - port: 8008
    tls: false
    # The lab's VMs share the host's loopback: the VM's own address.
    bind_addresses: ['`+addr+`']
    type: http
    x_forwarded: true
    resources:
      - names: [client, federation]
        compress: false
`+database+`log_config: "/etc/matrix-synapse/log.yaml"
media_store_path: /var/lib/matrix-synapse/media
signing_key_path: "/etc/matrix-synapse/homeserver.signing.key"
trusted_key_servers:
  - server_name: "matrix.org"
`)
	l.file("/etc/matrix-synapse/conf.d/server_name.yaml", 0o644, "", "# This file is autogenerated, and will be recreated on upgrade if it is deleted.\n# Any changes you make will be preserved.\n\n# The domain name of the server, with optional explicit port.\n# This is used by remote servers to connect to this server,\n# e.g. matrix.org, localhost:8080, etc.\n# This is also the last part of your UserID.\n#\nserver_name: "+MatrixDomain+"\n")
	l.file("/etc/matrix-synapse/conf.d/report_stats.yaml", 0o644, "", "# This file is autogenerated, and will be recreated on upgrade if it is deleted.\n# Any changes you make will be preserved.\n\n# Whether to report homeserver usage statistics.\nreport_stats: false\n")
	l.file("/etc/matrix-synapse/log.yaml", 0o644, "", synapseLogYAML)
	l.file("/etc/matrix-synapse/homeserver.signing.key", 0o640, "matrix-synapse", "ed25519 a_lab "+randomSecret()+"\n")
	l.file("/etc/default/matrix-synapse", 0o644, "", "# Specify environment variables used when running Synapse\n# SYNAPSE_CACHE_FACTOR=0.5 (default)\n")
	l.file("/lib/systemd/system/matrix-synapse.service", 0o644, "", synapseUnit)
	venv := "/opt/venvs/matrix-synapse"
	site := venv + "/lib/python3.11/site-packages"
	l.file(venv+"/pyvenv.cfg", 0o644, "", "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n")
	l.symlink(venv+"/bin/python3", "/usr/bin/python3")
	l.symlink(venv+"/bin/python", "python3")
	l.file(site+"/synapse/__init__.py", 0o644, "", "\"\"\"The lab's Synapse (lab/incushost/debian/synapse).\"\"\"\n__version__ = \""+h.SynapseVersion+"\"\n")
	l.file(site+"/synapse/app/__init__.py", 0o644, "", "")
	l.file(site+"/synapse/app/homeserver.py", 0o644, "", standIn("synapse/app/homeserver.py"))
	l.file("/var/lib/matrix-synapse/media/local_content/ab/cd/ef", 0o644, "matrix-synapse", "a picture\n")
	l.sh("Synapse's directories", "mkdir -p /var/log/matrix-synapse && chown -R matrix-synapse:matrix-synapse /var/lib/matrix-synapse /var/log/matrix-synapse", "")
	// The database as a running homeserver leaves it: Synapse's schema
	// (made by the stand-in, as Synapse makes it at its first start) and
	// its users.
	l.install = append(l.install, setupStep{what: "Synapse's database",
		argv: []string{"runuser", "-u", "matrix-synapse", "--", venv + "/bin/python", "-c", synapseFirstStart}})
	l.dpkgStatus("matrix-synapse-py3", h.SynapseVersion+"+bookworm1", "Open source Matrix homeserver implementation", venv+"/bin/python", "/lib/systemd/system/matrix-synapse.service", "/etc/matrix-synapse/homeserver.yaml")
}

// postgresLayout: Debian's PostgreSQL 15 cluster 15/main listening on the
// VM's address (localhost, in the VM), with Synapse's role and database
// made as Synapse's docs say (UTF8, C collation, from template0).
func postgresLayout(l *layout, addr, password string) {
	l.sh("PostgreSQL's cluster on the VM's address", `conf=/etc/postgresql/15/main
sed -i "s/^#\?listen_addresses = .*/listen_addresses = '`+addr+`'/" $conf/postgresql.conf
printf 'host\tall\tall\t%s/32\tscram-sha-256\n' `+addr+` >> $conf/pg_hba.conf
systemctl start postgresql@15-main.service
systemctl start postgresql.service`, "")
	l.sh("Synapse's PostgreSQL role and database", `runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -f - >/dev/null
runuser -u postgres -- createdb --encoding=UTF8 --locale=C --template=template0 --owner=synapse_user synapse`,
		"CREATE ROLE synapse_user LOGIN PASSWORD '"+strings.ReplaceAll(password, "'", "''")+"';\n")
}

// synapseFirstStart makes Synapse's database as its first start does
// (the stand-in's prepare_database), with two users.
const synapseFirstStart = `
from synapse.app import homeserver as hs
config = hs.load_config(["/etc/matrix-synapse/homeserver.yaml", "/etc/matrix-synapse/conf.d/"])
conn, mark = hs.connect(config)
hs.prepare_database(conn, mark)
cur = conn.cursor()
for u in ("ana", "ben"):
    name = "@%s:%s" % (u, config["server_name"])
    cur.execute("SELECT 1 FROM users WHERE name = %s".replace("%s", mark), (name,))
    if cur.fetchone() is None:
        cur.execute("INSERT INTO users (name, creation_ts) VALUES (%s, 1700000000)".replace("%s", mark), (name,))
conn.commit()
`

// jellyfinDefaults is Jellyfin's /etc/default/jellyfin (jellyfin-packaging
// debian/conf/jellyfin), its comments shortened.
const jellyfinDefaults = `# Jellyfin default configuration options
# This is a POSIX shell fragment

# Program directories
JELLYFIN_DATA_DIR="/var/lib/jellyfin"
JELLYFIN_CONFIG_DIR="/etc/jellyfin"
JELLYFIN_LOG_DIR="/var/log/jellyfin"
JELLYFIN_CACHE_DIR="/var/cache/jellyfin"

# web client path, installed by the jellyfin-web package
JELLYFIN_WEB_OPT="--webdir=/usr/share/jellyfin/web"

# ffmpeg binary paths, overriding the system values
JELLYFIN_FFMPEG_OPT="--ffmpeg=/usr/lib/jellyfin-ffmpeg/ffmpeg"

# Disable glibc dynamic heap adjustment
MALLOC_TRIM_THRESHOLD_=131072

# Space to add additional command line options to jellyfin (for help see ~$ jellyfin --help)
JELLYFIN_ADDITIONAL_OPTS=""
`

// jellyfinUnit is jellyfin-server's jellyfin.service.
const jellyfinUnit = `[Unit]
Description = Jellyfin Media Server
After = network-online.target

[Service]
Type = simple
EnvironmentFile = /etc/default/jellyfin
User = jellyfin
Group = jellyfin
WorkingDirectory = /var/lib/jellyfin
ExecStart = /usr/bin/jellyfin $JELLYFIN_WEB_OPT $JELLYFIN_FFMPEG_OPT $JELLYFIN_SERVICE_OPT $JELLYFIN_NOWEBAPP_OPT $JELLYFIN_ADDITIONAL_OPTS --datadir $JELLYFIN_DATA_DIR --configdir $JELLYFIN_CONFIG_DIR --logdir $JELLYFIN_LOG_DIR --cachedir $JELLYFIN_CACHE_DIR
Restart = on-failure
TimeoutSec = 15
SuccessExitStatus=0 143

[Install]
WantedBy = multi-user.target
`

// synapseUnit is matrix-synapse-py3's matrix-synapse.service.
const synapseUnit = `[Unit]
Description=Synapse Matrix homeserver
After=network.target

[Service]
Type=notify
User=matrix-synapse
WorkingDirectory=/var/lib/matrix-synapse
EnvironmentFile=-/etc/default/matrix-synapse
ExecStartPre=/opt/venvs/matrix-synapse/bin/python -m synapse.app.homeserver --config-path=/etc/matrix-synapse/homeserver.yaml --config-path=/etc/matrix-synapse/conf.d/ --generate-keys
ExecStart=/opt/venvs/matrix-synapse/bin/python -m synapse.app.homeserver --config-path=/etc/matrix-synapse/homeserver.yaml --config-path=/etc/matrix-synapse/conf.d/
ExecReload=/bin/kill -HUP $MAINPID
Restart=always
RestartSec=3
SyslogIdentifier=matrix-synapse

[Install]
WantedBy=multi-user.target
`
