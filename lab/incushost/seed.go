package incushost

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BaseImage is the image alias of an empty rootfs skeleton.
const BaseImage = "lab-base"

// ImportImage makes (or replaces) an image alias from a directory tree,
// copied as the rootfs of each instance created from it.
func (s *Server) ImportImage(alias, rootfs string) error {
	if alias == "" || strings.Contains(alias, "/") {
		return fmt.Errorf("incushost: bad image alias %q", alias)
	}
	dir := filepath.Join(s.dir, "images", alias)
	tmp := dir + ".new"
	_ = os.RemoveAll(tmp)
	if err := copyTree(rootfs, filepath.Join(tmp, "rootfs")); err != nil {
		return fmt.Errorf("incushost: importing image %s: %w", alias, err)
	}
	if err := os.Chmod(filepath.Join(tmp, "rootfs"), 0o755); err != nil { // a temp dir's 0700 would lock users out
		return err
	}
	_ = os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// HasImage says whether the alias exists.
func (s *Server) HasImage(alias string) bool {
	st, err := os.Stat(filepath.Join(s.dir, "images", alias, "rootfs"))
	return err == nil && st.IsDir()
}

// Skeleton writes an empty rootfs (/root, /etc, /var, /tmp, ...) in dir.
func Skeleton(dir string) error {
	for _, d := range []string{"root", "etc", "var/lib", "var/log", "tmp", "proc", "dev", "usr/local/bin", "var/mnt/data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	_ = os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(dir, "root"), 0o700)
	return os.WriteFile(filepath.Join(dir, "etc", "hostname"), []byte("lab\n"), 0o644)
}

// Busybox writes a busybox rootfs in dir: /bin/busybox (from the host's
// /bin/busybox, else none: the host's /usr then serves the commands) with
// a link per applet, and the skeleton.
func Busybox(dir string) error {
	if err := Skeleton(dir); err != nil {
		return err
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil // no busybox: the skeleton, with the host's commands bound in
	}
	for _, d := range []string{"bin", "sbin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(bb, filepath.Join(dir, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, app := range strings.Fields(string(out)) {
		p := filepath.Join(dir, "bin", app)
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			if err := os.Symlink("busybox", p); err != nil {
				return err
			}
		}
	}
	return nil
}

// systemctl is the stand-in of systemd in the old VMs: it records its
// calls and each service's state.
const systemctl = `#!/bin/sh
# lab stand-in for systemctl: records the calls and the services' states
echo "$*" >> /root/systemctl.calls
mkdir -p /run/lab-services
case "$1" in
stop) shift; for s in "$@"; do echo stopped > "/run/lab-services/$s"; done ;;
start | restart) shift; for s in "$@"; do echo running > "/run/lab-services/$s"; done ;;
is-active) [ "$(cat "/run/lab-services/$2" 2>/dev/null || echo running)" = running ] && { echo active; exit 0; }; echo inactive; exit 3 ;;
esac
exit 0
`

// sqlite3 is the stand-in of sqlite3 DB '.backup DEST'.
const sqlite3 = `#!/bin/sh
# lab stand-in for sqlite3 DB '.backup DEST'
exec cp "$1" "${2#.backup }"
`

// homeserverYAML is Synapse's configuration as Debian's matrix-synapse
// package leaves it (with server_name set, and the secrets Synapse
// generates: seedVM fills in random ones): listening on localhost behind
// the VM's reverse proxy, SQLite under /var/lib/matrix-synapse, the key
// and the log configuration under /etc/matrix-synapse.
const homeserverYAML = `# Configuration file for Synapse.
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
server_name: "matrix.example.org"
public_baseurl: "https://matrix.example.org/"
pid_file: "/var/run/matrix-synapse.pid"
listeners:
  - port: 8008
    tls: false
    type: http
    x_forwarded: true
    bind_addresses: ['::1', '127.0.0.1']
    resources:
      - names: [client, federation]
        compress: false
database:
  name: sqlite3
  args:
    database: /var/lib/matrix-synapse/homeserver.db
log_config: "/etc/matrix-synapse/log.yaml"
media_store_path: /var/lib/matrix-synapse/media
signing_key_path: "/etc/matrix-synapse/homeserver.signing.key"
trusted_key_servers:
  - server_name: "matrix.org"
enable_registration: false
registration_shared_secret: "@registration_shared_secret@"
macaroon_secret_key: "@macaroon_secret_key@"
form_secret: "@form_secret@"
report_stats: false
suppress_key_server_warning: true
`

// synapseLogYAML is Debian's /etc/matrix-synapse/log.yaml: a file under
// /var/log/matrix-synapse, which a pod does not have.
const synapseLogYAML = `version: 1
formatters:
  precise:
    format: '%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - %(request)s - %(message)s'
handlers:
  file:
    class: logging.handlers.RotatingFileHandler
    formatter: precise
    filename: /var/log/matrix-synapse/homeserver.log
    maxBytes: 104857600
    backupCount: 10
    encoding: utf8
loggers:
  synapse.storage.SQL:
    level: INFO
root:
  level: INFO
  handlers: [file]
disable_existing_loggers: false
`

// seededSecrets are the placeholders of homeserverYAML that seedVM fills
// with random values, as Synapse's --generate-config does.
var seededSecrets = []string{"registration_shared_secret", "macaroon_secret_key", "form_secret"}

// oldVMs are the brief's three old VMs: their files by path (mode 0755
// for the stand-in programs). The services VM holds Debian's jellyfin
// package (data in /var/lib/jellyfin, configuration in /etc/jellyfin,
// a library whose paths are those of the share) and Frigate run by
// Docker Compose from /opt/frigate (its /config: config.yml and the
// SQLite frigate.db).
var oldVMs = map[string]map[string]string{
	"services": {
		"/etc/samba/smb.conf":                                     "[global]\n   workgroup = HOME\n\n[media]\n   path = /var/mnt/data/media\n   read only = no\n",
		"/etc/jellyfin/system.xml":                                "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<ServerConfiguration xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\">\n  <IsStartupWizardCompleted>true</IsStartupWizardCompleted>\n  <ServerName>home</ServerName>\n  <EnableMetrics>false</EnableMetrics>\n</ServerConfiguration>\n",
		"/etc/jellyfin/encoding.xml":                              "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<EncodingOptions xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\">\n  <HardwareAccelerationType>vaapi</HardwareAccelerationType>\n  <VaapiDevice>/dev/dri/renderD128</VaapiDevice>\n</EncodingOptions>\n",
		"/etc/jellyfin/network.xml":                               "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<NetworkConfiguration xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\">\n  <InternalHttpPort>8096</InternalHttpPort>\n</NetworkConfiguration>\n",
		"/etc/jellyfin/logging.json":                              "{\n  \"Serilog\": {\n    \"MinimumLevel\": \"Information\"\n  }\n}\n",
		"/var/lib/jellyfin/data/jellyfin.db":                      "SQLite format 3\x00 the users: ana, ben\n",
		"/var/lib/jellyfin/data/library.db":                       "SQLite format 3\x00 the library: /var/mnt/data/media/movies/Night of the Lab (1968).mkv\n",
		"/var/lib/jellyfin/root/default/Movies/options.xml":       "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<LibraryOptions>\n  <PathInfos>\n    <MediaPathInfo>\n      <Path>/var/mnt/data/media/movies</Path>\n    </MediaPathInfo>\n  </PathInfos>\n</LibraryOptions>\n",
		"/var/lib/jellyfin/metadata/library/ab/abcdef/poster.jpg": "a poster\n",
		"/opt/frigate/docker-compose.yml":                         "services:\n  frigate:\n    image: ghcr.io/blakeblackshear/frigate:0.14.1\n    restart: unless-stopped\n    shm_size: 512mb\n    devices: [/dev/dri/renderD128]\n    volumes:\n      - ./config:/config\n      - /var/mnt/data/frigate:/media/frigate\n    ports: ['5000:5000', '8554:8554']\n",
		"/opt/frigate/config/config.yml":                          "mqtt:\n  enabled: false\ndatabase:\n  path: /config/frigate.db\nffmpeg:\n  hwaccel_args: preset-vaapi\ncameras:\n  driveway:\n    ffmpeg:\n      inputs:\n        - path: rtsp://192.168.1.60:554/stream1\n          roles: [detect, record]\n    detect:\n      width: 1280\n      height: 720\nrecord:\n  enabled: true\n  retain:\n    days: 7\n",
		"/opt/frigate/config/frigate.db":                          "SQLite format 3\x00 the events of camera driveway\n",
		"/usr/local/bin/systemctl":                                systemctl,
	},
	"matrix": {
		"/var/lib/matrix-synapse/homeserver.db":                "SQLite format 3\x00 the rooms\n",
		"/var/lib/matrix-synapse/media/local_content/ab/cd/ef": "a picture\n",
		"/etc/matrix-synapse/homeserver.signing.key":           "ed25519 a_lab 1+lab+signing+key+not+a+secret+elsewhere\n",
		"/etc/matrix-synapse/homeserver.yaml":                  homeserverYAML,
		"/etc/matrix-synapse/log.yaml":                         synapseLogYAML,
		"/usr/local/bin/systemctl":                             systemctl,
		"/usr/local/bin/sqlite3":                               sqlite3,
	},
	"k3s": {
		"/etc/rancher/k3s/k3s.yaml": "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user: {}\n",
		"/usr/local/bin/systemctl":  systemctl,
	},
}

// autostart are the old VMs that start with the host (boot.autostart),
// as a home server's services and homeserver do; the k3s playground is
// started by hand.
var autostart = map[string]bool{"services": true, "matrix": true}

// OldVMs names the three old VMs Seed creates.
var OldVMs = []string{"services", "matrix", "k3s"}

// seed makes the lab-base image and the old VMs that are absent, running.
func (s *Server) seed() error {
	if !s.HasImage(BaseImage) {
		tmp, err := os.MkdirTemp("", "incushost-base-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := Skeleton(tmp); err != nil {
			return err
		}
		if err := s.ImportImage(BaseImage, tmp); err != nil {
			return err
		}
	}
	for _, name := range OldVMs {
		s.mu.Lock()
		exists := s.instances[name] != nil
		s.mu.Unlock()
		if exists {
			continue
		}
		seed := s.seedVM
		if s.opts.OldHost != nil {
			seed = s.seedDebianVM
		}
		if err := seed(name); err != nil {
			return fmt.Errorf("incushost: seeding %s: %w", name, err)
		}
	}
	return nil
}

func (s *Server) seedVM(name string) error {
	s.mu.Lock()
	in := s.newOldVM(name)
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(in.dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := copyTree(filepath.Join(s.dir, "images", BaseImage, "rootfs"), in.rootfs()); err != nil {
		return err
	}
	for p, body := range oldVMs[name] {
		for _, k := range seededSecrets {
			if strings.Contains(body, "@"+k+"@") {
				body = strings.ReplaceAll(body, "@"+k+"@", randomSecret())
			}
		}
		f := filepath.Join(in.rootfs(), p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if strings.HasPrefix(body, "#!") || strings.HasSuffix(p, ".conf") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".xml") || strings.HasSuffix(p, ".json") ||
			strings.HasSuffix(p, ".yaml") && !strings.Contains(body, "secret") {
			mode = 0o644
		}
		if strings.HasPrefix(body, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(f, []byte(body), mode); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setVolatile(in)
	s.instances[name] = in
	s.logf("incus lab: seeded the old VM %s", name)
	return s.startLocked(in)
}

// randomSecret is a secret as Synapse generates them: 50 characters of
// letters, digits and symbols a double-quoted YAML string needs no escape for.
func randomSecret() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:^&*-_+=#~"
	b := make([]byte, 50)
	rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}
