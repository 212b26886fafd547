package incushost

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/lab/sandbox"
)

// OldHost is how the old VMs are installed when they are Debian hosts
// (Options.OldHost): a Debian root (lab/debroot) with the apps laid out
// as their packaging lays them out (debian_layout.go).
type OldHost struct {
	// Root is the Debian root's directory (lab/debroot.Root): its /usr is
	// each VM's, read-only below the VM's own files; the rest is copied.
	Root string
	// SynapseDB is Synapse's database.name: "sqlite3" (default) or
	// "psycopg2" (Debian's PostgreSQL 15 in the matrix VM).
	SynapseDB string
	// HWAccel switches hardware decoding on in Jellyfin and Frigate
	// (vaapi on /dev/dri/renderD128); off by default, as on a VM without
	// a GPU.
	HWAccel bool
	// FrigateService runs Frigate as a systemd unit of its own
	// (frigate.service running its container with docker run) instead
	// of the documented Docker Compose project.
	FrigateService bool
	// The apps' versions (default: DefaultSynapseVersion...).
	SynapseVersion, JellyfinVersion, FrigateVersion string
	// SambaPasswords are the Samba users' passwords by name (default:
	// ana and ben, random at each seeding); only their NT hashes stay in
	// the VM.
	SambaPasswords map[string]string
}

// The apps' versions on a default Debian old host: what the example's
// images are, or newer.
const (
	DefaultSynapseVersion  = "1.120.2"
	DefaultJellyfinVersion = "10.10.7"
	DefaultFrigateVersion  = "0.14.1"
)

func (h *OldHost) defaults() error {
	if h.Root == "" {
		return errors.New("incushost: Options.OldHost.Root is empty: build the Debian root with lab/debroot.Root")
	}
	if st, err := os.Stat(filepath.Join(h.Root, "usr", "bin")); err != nil || !st.IsDir() {
		return fmt.Errorf("incushost: Options.OldHost.Root %s is no Debian root (no usr/bin)", h.Root)
	}
	switch h.SynapseDB {
	case "":
		h.SynapseDB = "sqlite3"
	case "sqlite3", "psycopg2":
	default:
		return fmt.Errorf("incushost: Options.OldHost.SynapseDB %q: want sqlite3 or psycopg2 (Synapse's database.name)", h.SynapseDB)
	}
	h.SynapseVersion = orStr(h.SynapseVersion, DefaultSynapseVersion)
	h.JellyfinVersion = orStr(h.JellyfinVersion, DefaultJellyfinVersion)
	h.FrigateVersion = orStr(h.FrigateVersion, DefaultFrigateVersion)
	if h.SambaPasswords == nil {
		h.SambaPasswords = map[string]string{"ana": randomSecret(), "ben": randomSecret()}
	}
	return nil
}

// The lab's stand-ins for what Debian has no package of (the apps) or
// cannot run here (systemd, Docker), installed at the paths the real ones
// have.
//
//go:embed debian
var standIns embed.FS

// usrLayer is the overlay that makes an instance's /usr: the Debian
// root's, read-only, below the instance's own rootfs/usr.
func (in *instance) usrLayer() []sandbox.Bind {
	if in.UsrLayer == "" {
		return nil
	}
	return []sandbox.Bind{{Source: in.UsrLayer, Path: "/usr", Upper: filepath.Join(in.rootfs(), "usr"), Work: filepath.Join(in.dir, "usr.work")}}
}

// copyRootExceptUsr copies the Debian root into rootfs, all but /usr
// (shared, see usrLayer), which starts empty.
func copyRootExceptUsr(root, rootfs string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "usr"), 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() == "usr" {
			continue
		}
		src, dst := filepath.Join(root, e.Name()), filepath.Join(rootfs, e.Name())
		if e.Type()&os.ModeSymlink != 0 { // bin -> usr/bin, as merged /usr has it
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if err := copyTree(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// seedDebianVM makes one old VM from the Debian root: its files, then
// started, what its packages' installation did (users, databases) run
// in it, then its services booted.
func (s *Server) seedDebianVM(name string) error {
	start := time.Now()
	h := s.opts.OldHost
	s.mu.Lock()
	in := s.newOldVM(name)
	in.UsrLayer = filepath.Join(h.Root, "usr")
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(in.dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := copyRootExceptUsr(h.Root, in.rootfs()); err != nil {
		return err
	}
	layout, err := debianLayout(name, h, in.IPv4)
	if err != nil {
		return err
	}
	if err := layout.write(in.rootfs()); err != nil {
		return err
	}
	s.mu.Lock()
	s.setVolatile(in)
	s.instances[name] = in
	err = s.startLocked(in)
	init, booted := in.init, in.booted
	s.mu.Unlock()
	if err != nil {
		return err
	}
	<-booted
	// The apps' units are enabled once installed, as their postinst does.
	steps := layout.install
	if len(layout.enabled) > 0 {
		steps = append(steps, enableStep(layout.enabled))
	}
	for _, step := range steps {
		if err := runSetup(init, in, step); err != nil {
			return fmt.Errorf("installing %s: %w", step.what, err)
		}
	}
	if err := runSetup(init, in, bootStep); err != nil {
		return err
	}
	s.logf("incus lab: seeded the old VM %s (Debian, %s)", name, time.Since(start).Round(time.Millisecond))
	return nil
}

// newOldVM is the record of an old VM; the caller holds s.mu.
func (s *Server) newOldVM(name string) *instance {
	in := &instance{Name: name, Type: "virtual-machine", Architecture: "x86_64", Description: "the old " + name + " VM (lab)",
		Config:   map[string]string{"user.lab": "old-vm", "limits.cpu": "2", "limits.memory": "2GiB"},
		Devices:  map[string]map[string]string{"eth0": {"type": "nic", "network": s.opts.Network, "name": "eth0"}},
		Profiles: []string{"default"}, CreatedAt: time.Now().UTC(),
		dir: filepath.Join(s.dir, "instances", name), IPv4: s.newIP()}
	if autostart[name] {
		in.Config["boot.autostart"] = "true"
	}
	return in
}

// setupStep is one command the seeding runs in a VM, as root, as its
// packages' maintainer scripts would have, with its stdin: secrets go
// there, never in argv (argv is visible in /proc).
type setupStep struct {
	what  string
	argv  []string
	stdin string
}

// bootStep is what a Debian VM runs when it starts: systemd's enabled
// units, then the Docker daemon's containers with a restart policy.
var bootStep = setupStep{what: "the boot", argv: []string{"/bin/sh", "-c", "systemctl --lab-boot; ! command -v docker >/dev/null || docker --lab-boot"}}

// shutdownStep is what a Debian VM runs when it is stopped gracefully.
var shutdownStep = setupStep{what: "the shutdown", argv: []string{"/bin/sh", "-c", "! command -v docker >/dev/null || docker --lab-shutdown; systemctl --lab-shutdown"}}

// shutdownDebian stops a running Debian VM's services before its init is
// killed, as its shutdown would (a database closed cleanly); a forced
// stop skips it.
func (s *Server) shutdownDebian(in *instance) {
	s.mu.Lock()
	p, booted, debian := in.init, in.booted, in.UsrLayer != ""
	s.mu.Unlock()
	if p == nil || !debian {
		return
	}
	waitBooted(booted)
	if err := runSetup(p, in, shutdownStep); err != nil {
		s.logf("incus lab: %s: its shutdown: %v", in.Name, err)
	}
}

// shutdownDebianVMs shuts the running Debian VMs' services down, side by
// side.
func (s *Server) shutdownDebianVMs() {
	s.mu.Lock()
	var vms []*instance
	for _, in := range s.instances {
		if in.UsrLayer != "" && in.init != nil {
			vms = append(vms, in)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.shutdownDebian(in)
		}()
	}
	wg.Wait()
}

// enableStep enables units as `systemctl enable` does.
func enableStep(units []string) setupStep {
	return setupStep{what: "enabling " + strings.Join(units, ", "), argv: append([]string{"systemctl", "enable"}, units...)}
}

// runSetup runs step in the instance through its init (not the API: no
// exec event, it is the lab's doing) and fails with its output when it
// fails.
func runSetup(p *initProc, in *instance, step setupStep) error {
	out, err := os.CreateTemp(filepath.Join(in.dir, "logs"), "setup-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	stdin, w, err := os.Pipe()
	if err != nil {
		return err
	}
	go func() {
		_, _ = w.WriteString(step.stdin)
		w.Close()
	}()
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	r, err := p.execWith(execSpec{Command: step.argv, Env: env, Cwd: "/"}, stdin, out, out)
	stdin.Close()
	if err != nil {
		return err
	}
	if code := r.wait(); code != 0 {
		b, _ := os.ReadFile(out.Name())
		return fmt.Errorf("%s exited %d:\n%s", step.argv[0], code, bytes.TrimSpace(b))
	}
	return nil
}

// bootDebian runs bootStep in a Debian VM that just started, closing
// in.booted when it is done; commands sent meanwhile wait for it (see
// waitBooted), as they would find a real VM's services coming up.
func (s *Server) bootDebian(in *instance) {
	booted := make(chan struct{})
	in.booted = booted
	p := in.init
	go func() {
		defer close(booted)
		if err := runSetup(p, in, bootStep); err != nil {
			s.logf("incus lab: %s: its boot: %v", in.Name, err)
		}
	}()
}

// waitBooted waits, for a while, for a Debian VM's boot (its instance's
// booted, read under s.mu) to be done; nil for other instances.
func waitBooted(booted chan struct{}) {
	if booted != nil {
		select {
		case <-booted:
		case <-time.After(2 * time.Minute):
		}
	}
}

// standIn reads one of the embedded stand-ins.
func standIn(name string) string {
	b, err := standIns.ReadFile("debian/" + name)
	if err != nil {
		panic(err) // embedded at build time: a missing one is a bug
	}
	return string(b)
}

// ownerIDs are the users and groups the packages' postinst scripts add
// (adduser --system), by name, as the layout refers to them.
func ownerIDs(rootfs, name string) (uint32, uint32, error) {
	b, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 3 && f[0] == name {
			var uid, gid uint32
			if _, err := fmt.Sscan(f[2]+" "+f[3], &uid, &gid); err != nil {
				return 0, 0, err
			}
			return uid, gid, nil
		}
	}
	return 0, 0, fmt.Errorf("no user %s in the VM", name)
}
