package talos_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// maintLab is a lab node booted from the ISO (maintenance mode) and the
// user's own secrets bundle and talosconfig, as talosctl gen secrets and
// gen config write them.
type maintLab struct {
	*lab
	secrets, talosconfig string
}

var maintDisks = []talosnode.Disk{
	{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK", Transport: "scsi"},
	{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK", Serial: "bulk", Transport: "scsi"},
}

func startMaintenance(t *testing.T, disks []talosnode.Disk) *maintLab {
	t.Helper()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: disks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	if !n.Maintenance() {
		t.Fatal("the lab node is not in maintenance mode")
	}
	return newMaintLab(t, n, "https://127.0.0.1:6443")
}

// newMaintLab writes what a runbook against node n needs: an age identity,
// the brief's patch, a new secrets bundle, and a talosconfig that names n
// (its cluster endpoint: endpoint).
func newMaintLab(t *testing.T, n *talosnode.Node, endpoint string) *maintLab {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	l := &maintLab{lab: &lab{n: n, dir: t.TempDir(), id: id}}
	l.write(t, "identity.txt", id.String()+"\n")
	l.write(t, "patches/node.yaml", briefPatch)

	contract, err := coreconfig.ParseContractFromVersion("v1.13.3")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(bundle)
	if err != nil {
		t.Fatal(err)
	}
	l.secrets = l.write(t, "secrets.yaml", string(b))
	in, err := generate.NewInput("lab", endpoint, talosnode.KubernetesVersionOf("v1.13.3"), generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.Contexts[tc.Context].Endpoints = []string{n.Addr()}
	tb, err := tc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	l.talosconfig = l.write(t, "talosconfig", string(tb))
	return l
}

// config is the provider block; the endpoint is named by the runbook
// unless fromTalosconfig.
func (l *maintLab) config(fromTalosconfig bool) map[string]cty.Value {
	m := map[string]cty.Value{
		"talosconfig": cty.StringVal(l.talosconfig),
		"secrets":     cty.StringVal(l.secrets),
		"endpoints":   strs(l.n.Addr()),
	}
	if fromTalosconfig {
		m["endpoints"] = cty.NilVal
	}
	return m
}

func TestPlanFirstInstallOfMaintenanceNode(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	image := "factory.talos.dev/metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3"
	for _, want := range []string{
		"install: first config\n",
		"node " + l.n.Addr() + " booted Talos v1.13.3, the pinned version\n",
		"first apply allowed only to " + l.n.Addr() + " (the address the runbook names)",
		"install disk: /dev/sda\n",
		"installer image: " + image + " (schematic dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee, pinned version v1.13.3)",
		"HostnameConfig", "ExternalVolumeConfig data", "UserVolumeConfig bulk",
		"disks /dev/sda (34 GB, QEMU HARDDISK), /dev/sdb (161 GB, QEMU HARDDISK, serial bulk)",
	} {
		if !strings.Contains(r.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, r.Diff)
		}
	}
	assertNoSecrets(t, "the plan diff", r.Diff, bundleSecretsOf(t, l.secrets))
	if !strings.Contains(r.Irreversible, "first install") {
		t.Errorf("Irreversible = %q, want the first install named", r.Irreversible)
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("plan sent configs to the node: %+v", a)
	}
	if !l.n.Maintenance() {
		t.Error("the node left maintenance mode at plan")
	}
}

func TestFirstInstallOnlyToTheAddressTheRunbookNames(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(true)) // the address comes from the talosconfig
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "First Install Not Allowed") || !strings.Contains(err.Error(), l.n.Addr()+" comes from the talosconfig") {
		t.Fatalf("Plan error = %v, want the first install refused to an address the runbook does not name", err)
	}
}

func TestInstalledNodeIsNotMaintenance(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	// an mTLS failure that is not maintenance mode (here the talosconfig
	// of another bundle) stays the error of today
	ml := startMaintenance(t, maintDisks)
	p := l.provider(t, map[string]cty.Value{"talosconfig": cty.StringVal(ml.talosconfig), "endpoints": strs(l.n.Addr())})
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil || strings.Contains(r.Diff, "install: first config") || !strings.Contains(err.Error(), "did not answer its version") {
		t.Fatalf("Plan = %q, %v; want the version error of today", r.Diff, err)
	}
}

// planDiskError plans the brief's patch against a maintenance node with
// these disks and returns the one error diagnostic.
func planDiskError(t *testing.T, disks []talosnode.Disk) (summary, detail string, subject string) {
	t.Helper()
	l := startMaintenance(t, disks)
	p := l.provider(t, l.config(false))
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml")}))
	if len(r.Diagnostics) != 1 {
		t.Fatalf("want one diagnostic, got %v", r.Diagnostics)
	}
	d := r.Diagnostics[0]
	if d.Subject != nil {
		subject = d.Subject.Filename + ":" + strconv.Itoa(d.Subject.StartLine)
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("plan sent configs to the node: %+v", a)
	}
	return d.Summary, d.Detail, subject
}

const briefSelector = `"!system_disk && disk.size > 149u * GiB && disk.size < 151u * GiB"`

func TestFirstInstallSelectorMatchingNoDisk(t *testing.T) {
	t.Parallel()
	sum, detail, at := planDiskError(t, []talosnode.Disk{
		{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK"},
		{Name: "/dev/sdb", Size: "200GiB", Model: "QEMU HARDDISK"},
	})
	if sum != "Disk Selector Must Match One Disk" || at != "patches/node.yaml:23" {
		t.Errorf("diagnostic %q at %q", sum, at)
	}
	for _, want := range []string{`UserVolumeConfig "bulk" at patches/node.yaml:23`, briefSelector, "matches no disk", "/dev/sda (34 GB, QEMU HARDDISK), /dev/sdb (215 GB, QEMU HARDDISK)"} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail lacks %q: %s", want, detail)
		}
	}
}

func TestFirstInstallSelectorMatchingTwoDisks(t *testing.T) {
	t.Parallel()
	_, detail, at := planDiskError(t, []talosnode.Disk{
		{Name: "/dev/sda", Size: "32GiB"},
		{Name: "/dev/sdb", Size: "150GiB", Serial: "one"},
		{Name: "/dev/sdc", Size: "150GiB", Serial: "two"},
	})
	if at != "patches/node.yaml:23" {
		t.Errorf("subject %q", at)
	}
	for _, want := range []string{briefSelector, "matches 2 disks: /dev/sdb (161 GB, serial one), /dev/sdc (161 GB, serial two)"} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail lacks %q: %s", want, detail)
		}
	}
}

func TestFirstInstallMissingInstallDisk(t *testing.T) {
	t.Parallel()
	sum, detail, _ := planDiskError(t, []talosnode.Disk{
		{Name: "/dev/vda", Size: "32GiB"},
		{Name: "/dev/vdb", Size: "150GiB"},
	})
	if sum != "Install Disk Not Found" || !strings.Contains(detail, "has no disk /dev/sda") || !strings.Contains(detail, "/dev/vda (34 GB), /dev/vdb (161 GB)") {
		t.Errorf("%s: %s", sum, detail)
	}
}

func TestFirstInstallEndToEndThenResumeSeesPresent(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "verify": verify([]string{"apid", "machined"}, nil)})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	select {
	case <-l.n.Installed():
	default:
		t.Fatal("the node was not installed")
	}
	image, disk := l.n.Install()
	want := "factory.talos.dev/metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3"
	if image != want || disk != "/dev/sda" || l.n.Version() != "v1.13.3" {
		t.Errorf("installed %q on %q, running %s", image, disk, l.n.Version())
	}
	if r.Revert != nil {
		t.Errorf("a first install has revert data: %+v", r.Revert)
	}
	for _, w := range []string{"sending the first config", "waiting for the install and the reboot", "installed; checks passed (services healthy: apid, machined)", "a first install cannot be undone"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("the log lacks %q:\n%s", w, log.String())
		}
	}
	assertNoSecrets(t, "the log", log.String(), bundleSecretsOf(t, l.secrets))

	// A run killed during the reboot wait never recorded the step: a new
	// process reads it as Present and installs nothing again.
	applies := len(l.n.Applies())
	p2 := l.provider(t, l.config(false))
	rr := p2.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg})
	if rr.Observation != providers.Present || rr.Diagnostics.HasErrors() {
		t.Fatalf("Read of the installed node = %v %v: %s", rr.Observation, rr.Diagnostics, rr.Detail)
	}
	if !strings.Contains(rr.Outputs.GetAttr("installer_image").AsString(), want) {
		t.Errorf("outputs: %#v", rr.Outputs)
	}
	// and its plan is the mTLS one: no install
	pr = plan(p2, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil || strings.Contains(pr.Diff, "install: first config") || !strings.Contains(pr.Diff, "No changes.") {
		t.Errorf("plan after the install: %v\n%s", err, pr.Diff)
	}
	if got := l.n.Applies()[applies:]; len(got) != 1 || !got[0].DryRun {
		t.Errorf("after the install: applies %+v, want the plan's dry run only", got)
	}
}

func TestFirstInstallNotPlannedIsRefused(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	// a plan made when the node was installed (no first install in it)
	planned := []byte(`{"nodes":{},"rendered":"x"}`)
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: planned, Log: &bytes.Buffer{}})
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "did not say it installs it") || !l.n.Maintenance() {
		t.Fatalf("Apply = %v; maintenance %v", err, l.n.Maintenance())
	}
}

// cancelOn is a log that cancels when a line holds a phrase: a run
// killed at that moment.
type cancelOn struct {
	phrase string
	cancel context.CancelFunc
	buf    bytes.Buffer
}

func (w *cancelOn) Write(b []byte) (int, error) {
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), w.phrase) {
		w.cancel()
	}
	return len(b), nil
}

// TestFirstInstallFoundInFlightWaitsForTheReboot: a run stopped while the
// first install rebooted the node left the step recorded as running. The
// next run, started at once, reads it InFlight: the read waits for the
// node to answer again, as the stopped run would have, and finds it
// installed (Present), instead of taking the silent node for "not done"
// and failing its apply with "connection refused".
func TestFirstInstallFoundInFlightWaitsForTheReboot(t *testing.T) {
	t.Parallel()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: maintDisks, RebootDuration: 4 * time.Second, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	l := newMaintLab(t, n, "https://127.0.0.1:6443")
	p := l.provider(t, l.config(false))
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "verify": verify([]string{"apid"}, nil)})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := &cancelOn{phrase: "waiting for the install and the reboot", cancel: cancel}
	if r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: log}); !r.Diagnostics.HasErrors() {
		t.Fatalf("the apply stopped during the reboot succeeded:\n%s", log.buf.String())
	}

	p2 := l.provider(t, l.config(false))
	start := time.Now()
	rr := p2.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, InFlight: true})
	if rr.Observation != providers.Present || rr.Diagnostics.HasErrors() {
		t.Fatalf("the in-flight read after %s = %v %v: %s", time.Since(start).Round(time.Millisecond), rr.Observation, rr.Diagnostics.Err(), rr.Detail)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("the in-flight read returned after %s: the node was not rebooting, the test proves nothing", waited)
	}
	if got := len(n.Applies()); got != 1 {
		t.Errorf("the node got %d configs, want the first install's only", got)
	}
}

// A node booted from an ISO of another release than the pin is refused
// by the skew guard before its first config, at plan and at apply.
func TestFirstInstallRefusesISOOfAnotherVersion(t *testing.T) {
	t.Parallel()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Version: "v1.14.1", Disks: maintDisks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	l := newMaintLab(t, n, "https://127.0.0.1:6443")
	p := l.provider(t, l.config(false)) // pins v1.13.3
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	r := plan(p, talos.MachineConfig, cfg)
	err = r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "Talos Version Skew") || !strings.Contains(err.Error(), "booted Talos v1.14.1") || !strings.Contains(err.Error(), `pins version = "v1.13.3"`) {
		t.Fatalf("Plan = %q, %v; want the skew guard's refusal", r.Diff, err)
	}
	a := apply(context.Background(), p, talos.MachineConfig, cfg, &bytes.Buffer{})
	if err := a.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Talos Version Skew") || !strings.Contains(err.Error(), "Nothing was sent") {
		t.Fatalf("Apply: %v; want the skew guard's refusal", err)
	}
	if got := n.Applies(); len(got) != 0 || !n.Maintenance() {
		t.Errorf("the node got configs %+v (maintenance %v)", got, n.Maintenance())
	}
}

// A node the state records as installed that answers in maintenance mode
// (a reset node, or another machine of the LAN that took its address and
// plays one) is refused at read, plan and apply: it cannot prove who it
// is, and the first config carries the cluster's keys. Nothing is sent.
func TestInstalledNodeAnsweringInMaintenanceIsRefused(t *testing.T) {
	t.Parallel()
	l := startMaintenance(t, maintDisks)
	p := l.provider(t, l.config(false))
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	prior := &providers.Prior{Private: []byte(`{"nodes":{},"rendered":"x","first_install":["` + l.n.Addr() + `"]}`)}
	refused := func(what string, d interface{ Err() error }) {
		t.Helper()
		err := d.Err()
		if err == nil || !strings.Contains(err.Error(), "Installed Node In Maintenance Mode") || !strings.Contains(err.Error(), "Nothing is sent") {
			t.Errorf("%s: %v, want the installed node in maintenance mode refused", what, err)
		}
	}
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	refused("Read", rr.Diagnostics)
	pr := p.Plan(context.Background(), providers.PlanRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior, Action: providers.Update})
	refused("Plan", pr.Diagnostics)
	if strings.Contains(pr.Diff, "install: first config") {
		t.Errorf("the plan offers a first install:\n%s", pr.Diff)
	}
	// a plan that says first install (made as the node answered so, or
	// edited) does not make the apply send it
	ar := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior, Planned: prior.Private, Log: &bytes.Buffer{}})
	refused("Apply", ar.Diagnostics)
	if a := l.n.Applies(); len(a) != 0 || !l.n.Maintenance() {
		t.Errorf("the node got ApplyConfiguration: %+v (maintenance %v)", a, l.n.Maintenance())
	}
}

// The plan of a maintenance-mode first install says plainly that the MAC
// read is no authentication: the answering server reports it itself.
func TestMaintenancePlanSaysTheMACIsNoAuthentication(t *testing.T) {
	t.Parallel()
	l := startMaintenanceMAC(t, "10:66:6a:00:00:01")
	p := l.provider(t, l.config(false))
	r := plan(p, talos.MachineConfig, macConfig("10:66:6a:00:00:01"))
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	for _, want := range []string{"the MAC read is not authentication", "the cluster's keys cross the LAN", `first_install = "nocloud"`} {
		if !strings.Contains(r.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, r.Diff)
		}
	}
}
