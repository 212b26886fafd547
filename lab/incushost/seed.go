package incushost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
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

// oldVMs are the brief's three old VMs: their files by path (mode 0755
// for the stand-in programs).
var oldVMs = map[string]map[string]string{
	"services": {
		"/etc/samba/smb.conf":                 "[global]\n   workgroup = HOME\n\n[media]\n   path = /var/mnt/data/media\n   read only = no\n",
		"/var/lib/jellyfin/config/system.xml": "<ServerConfiguration><IsStartupWizardCompleted>true</IsStartupWizardCompleted></ServerConfiguration>\n",
		"/var/lib/frigate/config.yml":         "mqtt:\n  enabled: false\ncameras: {}\n",
		"/usr/local/bin/systemctl":            systemctl,
	},
	"matrix": {
		"/var/lib/matrix-synapse/homeserver.db":                "SQLite format 3\x00 the rooms\n",
		"/var/lib/matrix-synapse/media/local_content/ab/cd/ef": "a picture\n",
		"/etc/matrix-synapse/homeserver.signing.key":           "ed25519 a_lab 1+lab+signing+key+not+a+secret+elsewhere\n",
		"/etc/matrix-synapse/homeserver.yaml":                  "server_name: matrix.home.example\ndatabase:\n  name: sqlite3\n  args:\n    database: /var/lib/matrix-synapse/homeserver.db\nmedia_store_path: /var/lib/matrix-synapse/media\nsigning_key_path: /etc/matrix-synapse/homeserver.signing.key\n",
		"/usr/local/bin/systemctl":                             systemctl,
		"/usr/local/bin/sqlite3":                               sqlite3,
	},
	"k3s": {
		"/etc/rancher/k3s/k3s.yaml": "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user: {}\n",
		"/usr/local/bin/systemctl":  systemctl,
	},
}

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
		if err := s.seedVM(name); err != nil {
			return fmt.Errorf("incushost: seeding %s: %w", name, err)
		}
	}
	return nil
}

func (s *Server) seedVM(name string) error {
	now := time.Now().UTC()
	s.mu.Lock()
	in := &instance{Name: name, Type: "virtual-machine", Architecture: "x86_64", Description: "the old " + name + " VM (lab)",
		Config:   map[string]string{"user.lab": "old-vm", "limits.cpu": "2", "limits.memory": "2GiB"},
		Devices:  map[string]map[string]string{"eth0": {"type": "nic", "network": s.opts.Network, "name": "eth0"}},
		Profiles: []string{"default"}, CreatedAt: now,
		dir: filepath.Join(s.dir, "instances", name), IPv4: s.newIP()}
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(in.dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := copyTree(filepath.Join(s.dir, "images", BaseImage, "rootfs"), in.rootfs()); err != nil {
		return err
	}
	for p, body := range oldVMs[name] {
		f := filepath.Join(in.rootfs(), p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if strings.HasPrefix(body, "#!") || strings.HasSuffix(p, ".conf") || strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") {
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
