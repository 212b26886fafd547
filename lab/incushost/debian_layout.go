package incushost

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// layout is one Debian old VM as its packages left it: files (written
// before it first starts), system users (as adduser --system adds them),
// the units enabled at boot, and the commands that the packages'
// maintainer scripts or the admin ran (after it started: databases,
// Samba users). The sources of each fact: lab/incushost/doc.go's table.
type layout struct {
	files   []layoutFile
	users   []string // system users (and their groups), as adduser --system
	enabled []string // units in multi-user.target.wants
	install []setupStep
}

type layoutFile struct {
	path, body string
	mode       os.FileMode
	owner      string // a user of the layout's, "" for root
	link       bool   // body is a symlink's target
}

func (l *layout) file(path string, mode os.FileMode, owner, body string) {
	l.files = append(l.files, layoutFile{path: path, body: body, mode: mode, owner: owner})
}

func (l *layout) symlink(path, target string) {
	l.files = append(l.files, layoutFile{path: path, body: target, link: true})
}

// sh runs a shell script as root at installation; stdin carries secrets.
func (l *layout) sh(what, script, stdin string) {
	l.install = append(l.install, setupStep{what: what, argv: []string{"/bin/sh", "-ec", script}, stdin: stdin})
}

// debianLayout is the old VM name's layout; addr is its own address.
func debianLayout(name string, h *OldHost, addr string) (*layout, error) {
	l := &layout{}
	// The VMs share the host's loopback: "localhost" in a VM is its own
	// address, so that what listens on localhost meets no other VM's.
	l.file("/etc/hostname", 0o644, "", name+"\n")
	l.file("/etc/hosts", 0o644, "", addr+"\tlocalhost "+name+"\n")
	l.file("/usr/bin/systemctl", 0o755, "", standIn("systemctl"))
	switch name {
	case "services":
		servicesLayout(l, h, addr)
	case "matrix":
		matrixLayout(l, h, addr)
	case "k3s":
		l.file("/etc/rancher/k3s/k3s.yaml", 0o600, "", oldVMs["k3s"]["/etc/rancher/k3s/k3s.yaml"])
	default:
		return nil, fmt.Errorf("no Debian layout for an old VM named %s", name)
	}
	return l, nil
}

// write puts the layout's files, users and enabled units in rootfs.
func (l *layout) write(rootfs string) error {
	if err := addSystemUsers(rootfs, l.users); err != nil {
		return err
	}
	wants := filepath.Join(rootfs, "etc/systemd/system/multi-user.target.wants")
	ents, _ := os.ReadDir(wants)
	for _, e := range ents { // what the root's packages enabled, unless this VM runs it
		if strings.HasSuffix(e.Name(), ".service") && !slices.Contains(l.enabled, e.Name()) || e.Name() == "e2scrub_reap.service" {
			if err := os.Remove(filepath.Join(wants, e.Name())); err != nil {
				return err
			}
		}
	}
	for _, f := range l.files {
		if err := f.write(rootfs); err != nil {
			return err
		}
	}
	return nil
}

func (f layoutFile) write(rootfs string) error {
	path := f.path
	for _, d := range []string{"/bin/", "/sbin/", "/lib/"} { // merged /usr: these are links into it
		if strings.HasPrefix(path, d) {
			path = "/usr" + path
		}
	}
	p := filepath.Join(rootfs, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	_ = os.Remove(p)
	if f.link {
		return os.Symlink(f.body, p)
	}
	if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
		return err
	}
	if err := os.Chmod(p, f.mode); err != nil {
		return err
	}
	if f.owner == "" || os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := ownerIDs(rootfs, f.owner)
	if err != nil {
		return err
	}
	return os.Chown(p, int(uid), int(gid))
}

// addSystemUsers appends system users, each with its own group, to the
// root's passwd, group and shadow, at the first free IDs from 100, as
// adduser --system --group does.
func addSystemUsers(rootfs string, users []string) error {
	used := map[string]bool{}
	for _, f := range []string{"passwd", "group"} {
		b, err := os.ReadFile(filepath.Join(rootfs, "etc", f))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if fs := strings.Split(line, ":"); len(fs) > 2 {
				used[fs[2]] = true
			}
		}
	}
	next := 100
	for _, u := range users {
		for used[fmt.Sprint(next)] {
			next++
		}
		id := fmt.Sprint(next)
		used[id] = true
		home := map[string]string{"jellyfin": "/var/lib/jellyfin", "matrix-synapse": "/var/lib/matrix-synapse"}[u]
		for f, line := range map[string]string{
			"passwd": u + ":x:" + id + ":" + id + "::" + orStr(home, "/nonexistent") + ":/usr/sbin/nologin\n",
			"group":  u + ":x:" + id + ":\n",
			"shadow": u + ":!:20000::::::\n",
		} {
			fh, err := os.OpenFile(filepath.Join(rootfs, "etc", f), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = fh.WriteString(line)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// dpkgStatus appends a package's entry to /var/lib/dpkg/status and its
// file list, as dpkg does on installing it, so that dpkg-query answers.
func (l *layout) dpkgStatus(pkg, version, description string, files ...string) {
	entry := fmt.Sprintf("\nPackage: %s\nStatus: install ok installed\nPriority: optional\nSection: net\nMaintainer: lab\nArchitecture: amd64\nVersion: %s\nDescription: %s\n\n", pkg, version, description)
	script := `cat >> /var/lib/dpkg/status; printf '%s\n' /. "$@" > /var/lib/dpkg/info/` + pkg + `.list`
	l.install = append(l.install, setupStep{what: "dpkg's record of " + pkg, argv: append([]string{"/bin/sh", "-ec", script, "sh"}, files...), stdin: entry})
}
