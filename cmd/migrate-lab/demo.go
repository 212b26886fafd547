package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "embed"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/examples"
	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/views"
)

const demoHelp = `Run the whole migration of examples/homelab against the lab home server,
with the commands a person types (the migrate program beside migrate-lab,
or in PATH), and show the way back:

  1. start the lab (migrate-lab serve): an Incus host with the old VMs
     services, matrix and k3s, the host's data, an Image Factory;
  2. migrate plan;
  3. migrate run --phase ... for each phase, with live progress: the
     rehearsal, platform and data-apps with the runbook as it was written
     before groups (every step written out), then migrate plan of those
     phases with today's, whose moved blocks carry their records: nothing
     to create, update or repair; the other phases with today's;
  4. a failure injected in ingress-matrix: the homeserver does not answer
     from the internet, the federation check fails, migrate status shows
     where it stopped; the failure heals and the same command resumes;
  5. migrate status: every phase done;
  6. migrate rollback: every phase undone, the three old VMs running again
     with their data and their services (Jellyfin, Frigate, Synapse)
     active; migrate status.

The runbook is copied to DIR/homelab (the example as migrate carries it),
the lab lives in DIR/lab, its log in DIR/lab.log. The first run builds
the lab's Kubernetes binaries from the Go module proxy (several minutes,
once: they are cached). It needs migrate and its provider programs beside
migrate-lab: make build puts them all in bin/.

With --keep the lab stays up at the end, with the migration rolled back,
and the demo prints what to type to drive it by hand.`

type demoOptions struct {
	dir   string
	keep  bool
	block int
}

func (a *app) demoCommand() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Migrate examples/homelab against the lab home server, fail it, resume it, roll it back",
		Long:  demoHelp,
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return a.demo(c.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.dir, "dir", "", "the demo's directory `DIR`, new or empty (default: a new temporary directory, removed at the end unless --keep)")
	cmd.Flags().BoolVar(&o.keep, "keep", false, "leave the lab running at the end and print how to drive it")
	cmd.Flags().IntVar(&o.block, "address-block", 9, "the lab's VMs get addresses 127.`B`.1.N: another block than a migrate-lab serve beside it (0)")
	return cmd
}

// beforeGroups is examples/homelab's main.hcl before groups: the demo
// runs the first phases with it, then shows today's runbook carrying
// their records.
//
//go:embed homelab-before-groups.hcl
var beforeGroups []byte

// demoPhases are examples/homelab's phases, in order.
var demoPhases = []string{"rehearsal", "platform", "data-apps", "host-services", "ingress-matrix", "cleanup"}

// demoVMs are the old VMs and a file of each that must be there after
// the rollback.
var demoVMs = []struct{ name, file string }{
	{"services", "/var/lib/jellyfin/data/jellyfin.db"},
	{"matrix", "/var/lib/matrix-synapse/homeserver.db"},
	{"k3s", "/etc/rancher/k3s/k3s.yaml"},
}

type demo struct {
	a       *app
	o       demoOptions
	dir     string // the demo's directory
	runbook string // dir/homelab
	lab     string // dir/lab
	labLog  string // dir/lab.log
	self    string // this migrate-lab: it serves the lab
	migrate string // the migrate the demo drives
	env     []string
	labCmd  *exec.Cmd
	labDone chan struct{}
	v       *views.Demo // the narration
	start   time.Time
}

func (a *app) demo(ctx context.Context, o demoOptions) (err error) {
	// Ctrl-C reaches the migrate the demo runs (it stops where the state
	// says); the demo itself only stops the lab then.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	d := &demo{a: a, o: o, start: time.Now(), v: a.view().Demo()}
	if d.migrate, err = locate("migrate"); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		// The lab maps only its user's own uid into the namespaces it runs
		// commands in: Synapse's restore Job (chown -R 991:991, as on a
		// real node) would fail half-way through. Say so before starting.
		return errors.New("migrate-lab demo needs root: the Matrix move's restore Job gives Synapse's data to its user (chown 991), and as another user the lab can map only your own uid. " +
			"Run it as root (sudo make demo), or drive the lab yourself: migrate-lab serve, then the phases up to host-services (see README.md, The lab)")
	}
	if d.self, err = os.Executable(); err != nil {
		return err
	}
	if err := d.prepare(); err != nil {
		return err
	}
	defer func() {
		if err != nil || ctx.Err() != nil {
			if !o.keep {
				d.stopLab()
			}
			d.v.Stopped(d.dir, d.labLog)
			if ctx.Err() != nil && err == nil {
				err = errInterrupted
			}
			return
		}
		if o.keep {
			d.keepHint()
			return
		}
		d.stopLab()
		if o.dir == "" {
			os.RemoveAll(d.dir)
		}
	}()
	if err := d.startLab(ctx); err != nil {
		return err
	}
	return d.script(ctx)
}

// errInterrupted: the demo was stopped by a signal (exit 130).
var errInterrupted = &codeError{code: exitInterrupted, err: errors.New("the demo was interrupted")}

// prepare makes the demo's directory and copies the example into it.
func (d *demo) prepare() error {
	d.dir = d.o.dir
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "migrate-demo-")
		if err != nil {
			return err
		}
		d.dir = dir
	} else {
		abs, err := filepath.Abs(d.dir)
		if err != nil {
			return err
		}
		d.dir = abs
		if ents, err := os.ReadDir(d.dir); err == nil && len(ents) > 0 {
			return fmt.Errorf("--dir %s is not empty: give a new or empty directory (the demo writes its runbook, lab and state there)", d.dir)
		}
		if err := os.MkdirAll(d.dir, 0o700); err != nil {
			return err
		}
	}
	d.runbook, d.lab, d.labLog = filepath.Join(d.dir, "homelab"), filepath.Join(d.dir, "lab"), filepath.Join(d.dir, "lab.log")
	return copyFS(examples.Homelab(), d.runbook)
}

// copyFS writes fsys under dir; the demo's age identity is private (0600).
func copyFS(fsys fs.FS, dir string) error {
	return fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if e.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "secrets/") {
			mode = 0o600
		}
		return os.WriteFile(dst, b, mode)
	})
}

// startLab runs migrate-lab serve in the background, its output in lab.log, and
// waits until it serves and its Kubernetes binaries are ready (built the
// first time, with the build's progress shown).
func (d *demo) startLab(ctx context.Context) error {
	logf, err := os.OpenFile(d.labLog, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	d.labCmd = exec.Command(d.self, "serve", "--dir", d.lab, "--address-block", strconv.Itoa(d.o.block))
	d.labCmd.Stdout, d.labCmd.Stderr = logf, logf
	// Its own session: a Ctrl-C at the terminal is the demo's to handle;
	// without --keep it goes when the demo goes, however that ends.
	d.labCmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !d.o.keep {
		d.labCmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	}
	d.v.Say("Starting the lab home server in %s (an Incus host with the old VMs services, matrix and k3s; its log: %s)", d.lab, d.labLog)
	if err := d.labCmd.Start(); err != nil {
		return fmt.Errorf("starting %s serve: %w", d.self, err)
	}
	d.labDone = make(chan struct{})
	go func() {
		_ = d.labCmd.Wait()
		close(d.labDone)
	}()

	log, err := os.Open(d.labLog)
	if err != nil {
		return err
	}
	defer log.Close()
	lines := bufio.NewReader(log)
	var partial string
	var env []string
	deadline := time.Now().Add(60 * time.Minute) // a cold build on a slow machine
	for tick := time.NewTicker(200 * time.Millisecond); ; {
		for {
			s, err := lines.ReadString('\n')
			partial += s
			if err != nil {
				break
			}
			line := strings.TrimSpace(partial)
			partial = ""
			switch {
			case strings.Contains(line, "the Kubernetes binaries are ready"):
				if env == nil {
					env, _ = labenv.Read(d.lab) //nolint:errcheck // checked below
				}
				if env != nil {
					d.env = d.environ(env)
					return nil
				}
			case strings.Contains(line, "could not be built"):
				return fmt.Errorf("the lab could not build its Kubernetes binaries: %s (see %s)", line, d.labLog)
			case strings.Contains(line, "kubecp: first run"), strings.Contains(line, "kubecp: still building"), strings.Contains(line, "kubecp: binaries built"):
				d.v.Progress(strings.TrimPrefix(line, "lab: kubecp: "))
			}
		}
		if env == nil {
			env, _ = labenv.Read(d.lab) //nolint:errcheck // not yet up
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.labDone:
			return fmt.Errorf("the lab stopped: %s", lastLines(d.labLog, 5))
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab was not ready after an hour (see %s)", d.labLog)
		}
	}
}

// environ is the demo's environment for migrate: the lab's variables, the
// demo identity, and a short wait for the federation check.
func (d *demo) environ(lab []string) []string {
	env := append(os.Environ(), lab...)
	return append(env,
		"MIGRATE_AGE_IDENTITY="+filepath.Join(d.runbook, "secrets", "demo-identity.txt"),
		"MIGRATE_VAR_federation_wait=15s")
}

// script is what the demo shows, in order.
func (d *demo) script(ctx context.Context) error {
	d.v.Say("The plan of the whole migration: nothing is changed before it is shown")
	if err := d.run(ctx, false, "plan"); err != nil {
		return err
	}
	first := demoPhases[:2]
	d.v.Say("The rehearsal and the platform run with the runbook as it was written before groups: main.hcl with every step written out")
	err := d.beforeGroups(func() error {
		for _, ph := range first {
			d.v.Say("Phase %s", ph)
			if err := d.run(ctx, false, "run", "--phase", ph, "--auto-approve"); err != nil {
				return err
			}
			if ph == "platform" {
				if err := d.configCleared(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.v.Say("Today's runbook, with groups: its moved blocks carry those phases' records to the steps' new addresses, and nothing of them is planned again")
	plan := []string{"plan"}
	for _, ph := range first {
		plan = append(plan, "--phase", ph)
	}
	if err := d.run(ctx, false, plan...); err != nil {
		return err
	}
	d.v.Say("Phase data-apps: each app's data copied onto the data volume while it still runs (the warm pass); then it stops, and only what changed is copied and both trees' manifests compared (the final pass)")
	if err := d.run(ctx, false, "run", "--phase", "data-apps", "--auto-approve"); err != nil {
		return err
	}
	for _, ph := range demoPhases[3:4] {
		hs := []string{"run", "--phase", ph, "--auto-approve"}
		d.v.Say("Phase %s, killed (SIGKILL, as a power cut would) while Samba's new release starts: the old smbd is stopped already", ph)
		if err := d.runKilled(ctx, "helm_release.samba: started", hs...); err != nil {
			return err
		}
		d.v.Say("The same command resumes it: Samba's window of downtime counts from the first run's stop, not from this one")
		if err := d.run(ctx, false, hs...); err != nil {
			return err
		}
	}
	ingress := []string{"run", "--phase", "ingress-matrix", "--auto-approve", "--approve", "approval.dns"}
	d.v.Say("Phase ingress-matrix, with a failure injected: the homeserver does not answer from the internet")
	if err := d.labSignal(syscall.SIGUSR1); err != nil {
		return err
	}
	if err := d.run(ctx, true, ingress...); err != nil {
		return err
	}
	if err := d.wantStatus(ctx, "ingress-matrix", "http_check.federation", "failed"); err != nil {
		return err
	}
	d.v.Say("migrate status says where it stopped")
	if err := d.run(ctx, false, "status"); err != nil {
		return err
	}
	d.v.Say("The failure heals (DNS has propagated): the same command resumes where it stopped")
	if err := d.labSignal(syscall.SIGUSR2); err != nil {
		return err
	}
	if err := d.run(ctx, false, ingress...); err != nil {
		return err
	}
	d.v.Say("Phase cleanup: the old VMs stopped, with a snapshot, kept")
	if err := d.run(ctx, false, "run", "--phase", "cleanup", "--auto-approve"); err != nil {
		return err
	}
	if err := d.run(ctx, false, "status"); err != nil {
		return err
	}
	d.v.Say("The move drawn as a timeline, for a browser: each phase a lane, each step a bar, each service's downtime shaded, the kill and the failure marked")
	for _, format := range []string{"html", "svg"} {
		if err := d.run(ctx, false, "report", "--format", format, "--output", filepath.Join(d.dir, "timeline."+format)); err != nil {
			return err
		}
	}
	d.v.Say("And the way back: every phase undone, the old VMs started again")
	if err := d.run(ctx, false, "rollback", "--auto-approve"); err != nil {
		return err
	}
	if err := d.oldVMsBack(ctx); err != nil {
		return err
	}
	if err := d.run(ctx, false, "status"); err != nil {
		return err
	}
	d.v.Complete(time.Since(d.start))
	return nil
}

// run runs migrate in the runbook's directory, on the terminal
// (its live progress as a person sees it). wantFail: it must fail.
func (d *demo) run(ctx context.Context, wantFail bool, args ...string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if d.a.noColor {
		args = append(args, "--no-color")
	}
	d.v.Command("migrate", args)
	cmd := exec.Command(d.migrate, args...) // not CommandContext: a Ctrl-C reaches it from the terminal
	cmd.Dir, cmd.Env = d.runbook, d.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	err := cmd.Run()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case wantFail && err == nil:
		return fmt.Errorf("migrate %s succeeded, but the injected failure should have stopped it", strings.Join(args, " "))
	case wantFail:
		return nil
	case err != nil:
		return fmt.Errorf("migrate %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// runKilled runs migrate as run does and kills it (SIGKILL: no handler
// runs, as in a power cut) once it printed a line holding trigger; it
// must not end on its own before that.
func (d *demo) runKilled(ctx context.Context, trigger string, args ...string) error {
	if d.a.noColor {
		args = append(args, "--no-color")
	}
	d.v.Command("migrate", args)
	cmd := exec.Command(d.migrate, args...)
	cmd.Dir, cmd.Env, cmd.Stdin, cmd.Stderr = d.runbook, d.env, nil, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	killed := false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fmt.Fprintln(os.Stdout, sc.Text())
		if !killed && strings.Contains(sc.Text(), trigger) {
			killed = cmd.Process.Kill() == nil
		}
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case !killed:
		return fmt.Errorf("migrate %s ended (%v) before it printed %q, where the demo kills it", strings.Join(args, " "), err, trigger)
	}
	d.v.Say("Killed: %v", err)
	return nil
}

// beforeGroups runs f with the demo's runbook as it was before groups
// (its main.hcl, without moved.hcl), then puts today's back.
func (d *demo) beforeGroups(f func() error) (err error) {
	main, moved := filepath.Join(d.runbook, "main.hcl"), filepath.Join(d.runbook, "moved.hcl")
	today, err := os.ReadFile(main)
	if err != nil {
		return err
	}
	moves, err := os.ReadFile(moved)
	if err != nil {
		return err
	}
	if err := os.WriteFile(main, beforeGroups, 0o644); err != nil {
		return err
	}
	if err := os.Remove(moved); err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, os.WriteFile(main, today, 0o644), os.WriteFile(moved, moves, 0o644))
	}()
	return f()
}

// wantStatus checks, through migrate status --json, that step addr of
// phase has status want.
func (d *demo) wantStatus(ctx context.Context, phase, addr, want string) error {
	cmd := exec.CommandContext(ctx, d.migrate, "status", "--json")
	cmd.Dir, cmd.Env = d.runbook, d.env
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("migrate status --json: %w", err)
	}
	var st views.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("migrate status --json: %w", err)
	}
	for _, ph := range st.Phases {
		for _, s := range ph.Steps {
			if ph.Name == phase && s.Addr.String() == addr {
				if string(s.Status) != want {
					return fmt.Errorf("%s is %s, not %s as the injected failure should have left it", addr, s.Status, want)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("migrate status does not list %s in phase %s", addr, phase)
}

// oldVMsBack shows, through the lab's Incus API, the three old VMs
// running with their data, and the services the move stopped in them
// (Jellyfin and Frigate in services, Synapse in matrix) active again.
func (d *demo) oldVMsBack(ctx context.Context) error {
	d.v.Say("The old VMs, read from the lab's Incus host")
	c, err := d.labClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, vm := range demoVMs {
		in, _, err := c.Instance(ctx, vm.name)
		if err != nil {
			return err
		}
		if in.Status != "Running" {
			return fmt.Errorf("the old VM %s is %s after the rollback", vm.name, in.Status)
		}
		fi, err := c.StatFile(ctx, vm.name, vm.file)
		if err != nil {
			return fmt.Errorf("the old VM %s after the rollback: %s: %w", vm.name, vm.file, err)
		}
		d.v.OldVM(vm.name, in.Status, vm.file, fi.Type, fi.Mode)
	}
	// The services the move stopped in them run again, each as it is
	// installed there.
	for _, s := range d.oldServices() {
		e, err := c.StartExec(ctx, s.vm, incusapi.ExecPost{Command: s.check})
		if err != nil {
			return err
		}
		code, err := c.WaitExec(ctx, e)
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("%s is not running in the old VM %s after the rollback (%s exited %d)", s.name, s.vm, strings.Join(s.check, " "), code)
		}
		if s.compose {
			d.v.ComposeRunning(s.vm, s.name)
		} else {
			d.v.UnitActive(s.vm, s.name)
		}
	}
	return nil
}

// oldService is a service the move stops in an old VM, and how to ask
// whether it runs.
type oldService struct {
	vm, name string
	compose  bool // a Docker Compose project, not a systemd unit
	check    []string
}

// oldServices are the services the move stops in the old VMs: Frigate as
// the lab's host runs it (a Compose project on the Debian host), Samba's
// smbd on the Debian host.
func (d *demo) oldServices() []oldService {
	unit := func(vm, name string) oldService {
		return oldService{vm: vm, name: name, check: []string{"systemctl", "is-active", name}}
	}
	services := []oldService{unit("services", "jellyfin")}
	if slices.Contains(d.env, "MIGRATE_VAR_frigate_install=compose") {
		services = append(services,
			oldService{vm: "services", name: "frigate", compose: true, check: []string{"sh", "-c", `docker compose ls --format json | grep -q '"Name": *"frigate", *"Status": *"running'`}},
			unit("services", "smbd"))
	} else {
		services = append(services, unit("services", "frigate"))
	}
	return append(services, unit("matrix", "matrix-synapse"))
}

// configCleared checks, through the lab's Incus host, that the Talos VM
// installed from its config drive and that its instance config no longer
// holds the first machine config (cloud-init.user-data), nor the drive.
func (d *demo) configCleared(ctx context.Context) error {
	c, err := d.labClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	in, _, err := c.Instance(ctx, "talos")
	if err != nil {
		return err
	}
	if _, ok := in.Config["cloud-init.user-data"]; ok {
		return errors.New("the Talos VM's instance config still holds cloud-init.user-data (the cluster's keys) after the platform phase")
	}
	for name, dev := range in.Devices {
		if dev["source"] == "cloud-init:config" {
			return fmt.Errorf("the Talos VM still has its config drive (device %s) after the platform phase", name)
		}
	}
	d.v.Say("The Talos VM, read from the lab's Incus host: its instance config holds no cloud-init.user-data and no config drive any more")
	return nil
}

// labSignal sends the lab a signal (SIGUSR1: the federation fails;
// SIGUSR2: it heals).
func (d *demo) labSignal(sig syscall.Signal) error {
	if err := d.labCmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling the lab: %w", err)
	}
	// It says so in its log: wait for the line, so the run sees the change.
	want := "now fails"
	if sig == syscall.SIGUSR2 {
		want = "answers again"
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(lastLines(d.labLog, 20), want) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the lab did not take signal %v (see %s)", sig, d.labLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// stopLab ends the lab: SIGTERM, then SIGKILL after a minute.
func (d *demo) stopLab() {
	if d.labCmd == nil || d.labCmd.Process == nil {
		return
	}
	_ = d.labCmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.labDone:
	case <-time.After(time.Minute):
		_ = d.labCmd.Process.Kill()
		<-d.labDone
	}
}

// keepHint says how to drive the lab left running.
func (d *demo) keepHint() {
	d.v.Kept(views.DemoKept{PID: d.labCmd.Process.Pid, LabDir: d.lab, Identity: filepath.Join(d.runbook, "secrets", "demo-identity.txt"),
		Runbook: d.runbook, LabLog: d.labLog})
}

// lastLines is the end of a file, n lines at most.
func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > 64<<10 {
		_, _ = f.Seek(-64<<10, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// locate finds a program beside migrate-lab, else in PATH.
func locate(name string) (string, error) {
	var beside string
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the demo drives %s, which was found neither beside migrate-lab (%s) nor in PATH: build it with `make build` "+
		"(it goes to bin/ beside migrate-lab, with the provider programs whose sums it records)", name, beside)
}

// labClient is a client of the lab's Incus host, as the demo's user has
// it (lab.env's client configuration); close it after.
func (d *demo) labClient() (*incusapi.Client, error) {
	opts, err := incusapi.RemoteOptions(labenv.ClientConfig(d.lab), "")
	if err != nil {
		return nil, err
	}
	return incusapi.New(opts)
}
