package talos_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talospatch"
)

// schedulePatch114 lets pods schedule on a Talos 1.14 control plane: 1.14
// generates the control-plane taint into the KubeNodeConfig document
// (cluster.allowSchedulingOnControlPlanes conflicts with it).
const schedulePatch114 = `apiVersion: v1alpha1
kind: KubeNodeConfig
taints:
  node-role.kubernetes.io/control-plane:
    $patch: delete
`

// The homelab's node pinned to v1.14.1 against a lab node of that
// release: rendered with 1.14's contract (the install in an
// UnattendedInstallConfig of the 1.14 installer, the Kubernetes config
// in its own documents), planned with the node's dry run, and applied
// through the ladder with AUTO, which 1.14 takes as NO_REBOOT even for a
// change 1.13 reboots for.
func TestPin114PlansAndRunsAgainst114Node(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.14.1")
	l.write(t, "patches/schedule.yaml", schedulePatch114)
	l.write(t, "patches/env.yaml", "machine:\n  env:\n    HTTP_PROXY: http://proxy:3128\n")
	p := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.14.1")})
	cfg := obj(map[string]cty.Value{
		"patches":     strs("patches/node.yaml", "patches/schedule.yaml", "patches/env.yaml"),
		"mode":        cty.StringVal("auto"),
		"try_timeout": cty.StringVal("30s"),
		"verify":      verify([]string{"apid"}, nil),
	})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	image := "factory.talos.dev/metal-installer/" + talos.ExtensionsSchematicID("siderolabs/i915") + ":v1.14.1"
	for _, want := range []string{"rendered for Talos v1.14.1, Kubernetes 1.37.0", image, "config diff", "UnattendedInstallConfig", "resolves auto to no-reboot"} {
		if !strings.Contains(pr.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, pr.Diff)
		}
	}
	if strings.Contains(pr.Diff, "needs a reboot") {
		t.Errorf("the plan says a reboot is needed, which 1.14 never does:\n%s", pr.Diff)
	}
	var log bytes.Buffer
	ar := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := ar.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	var modes []string
	for _, a := range l.n.Applies() {
		if !a.DryRun {
			modes = append(modes, a.Mode+">"+a.EffectiveMode)
		}
	}
	if got := strings.Join(modes, ","); got != "TRY>TRY,AUTO>NO_REBOOT" {
		t.Errorf("applies = %s, want TRY>TRY,AUTO>NO_REBOOT", got)
	}
	if got := ar.Outputs.AsValueMap()["installer_image"].AsString(); got != image {
		t.Errorf("installer_image = %s, want %s", got, image)
	}
	running, err := configloader.NewFromBytes(l.n.PersistedConfig())
	if err != nil {
		t.Fatal(err)
	}
	if u := running.UnattendedInstallConfig(); u == nil || u.InstallerImage() != image {
		t.Errorf("the node's config installs %v, want %s", u, image)
	}
	if taints := running.K8sNodeConfig().Taints(); len(taints) != 0 {
		t.Errorf("the node keeps taints %v despite the KubeNodeConfig patch", taints)
	}
}

// The 1.13 way of letting pods schedule on a control plane, rendered for
// 1.14, is refused at plan naming the KubeNodeConfig way.
func TestPin114OldSchedulingKeyNamesTheNewWay(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.14.1")
	l.write(t, "patches/schedule.yaml", "cluster:\n  allowSchedulingOnControlPlanes: true\n")
	p := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.14.1")})
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/schedule.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil {
		t.Fatal("cluster.allowSchedulingOnControlPlanes rendered for 1.14 was not refused")
	}
	for _, want := range []string{"patches/schedule.yaml:2", "KubeNodeConfig", "$patch: delete", "Talos 1.14"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if len(l.n.Applies()) != 0 {
		t.Error("the node was sent a config")
	}
}

// A v1.13.3 pin against a v1.14.1 node is refused by the skew guard,
// before anything is sent.
func TestPin113Against114NodeRefusedBySkewGuard(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.14.1")
	p := l.provider(t, nil) // version = v1.13.3
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	pr := plan(p, talos.MachineConfig, cfg)
	err := pr.Diagnostics.Err()
	if err == nil {
		t.Fatal("a v1.13.3 pin planned against a v1.14.1 node")
	}
	for _, want := range []string{"Talos Version Skew", "runs Talos v1.14.1", "version = \"v1.14.1\"", ":v1.13.3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if len(l.n.Applies()) != 0 {
		t.Error("the node was sent a config despite the skew")
	}
}

// A pin newer than the linked machinery, or older than the oldest release
// the provider supports, is refused when the provider block is read, with
// what to do.
func TestPinOutsideTheSupportedReleasesRefused(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.14.1")
	for pin, wants := range map[string][]string{
		"v1.15.0":        {"Unsupported Talos Version", "v1.15.0", "newer than the machine-config library", "v1.14", "Pin a v1.14 or v1.13 release"},
		"v1.15.0-beta.0": {"Unsupported Talos Version", "v1.15.0-beta.0", "newer than the machine-config library", "built with machinery v1.15"},
		"v1.12.6":        {"Unsupported Talos Version", "v1.12.6", "older than the oldest release", "v1.13", "upgrade the cluster"},
	} {
		p := talos.New()
		r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Config: l.providerConfig(map[string]cty.Value{"version": cty.StringVal(pin), "kubernetes_version": cty.StringVal("1.33.0")}), Dir: l.dir})
		_ = p.Close()
		err := r.Diagnostics.Err()
		if err == nil {
			t.Errorf("version = %q was taken", pin)
			continue
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("version = %q: the refusal lacks %q: %v", pin, want, err)
			}
		}
	}
}

// Talos 1.14 has no REBOOT apply mode: mode = "reboot" is refused at plan,
// before any TRY.
func TestRebootModeRefusedFor114(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.14.1")
	p := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.14.1")})
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "mode": cty.StringVal("reboot")}))
	err := r.Diagnostics.Err()
	if err == nil {
		t.Fatal("mode = \"reboot\" planned for Talos 1.14")
	}
	for _, want := range []string{"\"reboot\"", "v1.14.1", "mode = \"auto\" or \"no-reboot\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if len(l.n.Applies()) != 0 {
		t.Error("the node was sent a config")
	}
}

// A v1.14.1 pin installs a node booted from a 1.14 ISO: the first config
// (its install in UnattendedInstallConfig) goes over the maintenance API,
// the node installs from its disk selector and comes back over mTLS.
func TestFirstInstall114(t *testing.T) {
	t.Parallel()
	n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Version: "v1.14.1", Maintenance: true, Disks: maintDisks, RebootDuration: 200 * time.Millisecond, Hostname: "lab-node"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	l := newMaintLab(t, n, "https://127.0.0.1:6443")
	cfgBlock := l.config(false)
	cfgBlock["version"] = cty.StringVal("v1.14.1")
	p := l.provider(t, cfgBlock)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "verify": verify([]string{"apid"}, nil)})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if !strings.Contains(pr.Diff, "install: first config") {
		t.Errorf("the plan is not a first install:\n%s", pr.Diff)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Planned: pr.Private, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	image, disk := n.Install()
	if !strings.HasSuffix(image, ":v1.14.1") || disk != "/dev/sda" || n.Version() != "v1.14.1" {
		t.Errorf("installed %q on %q, running %s", image, disk, n.Version())
	}
}

// The homelab's 1.13 patch pinned to 1.14: the plan fails showing the
// patch rewritten into 1.14's documents as a diff, with the command that
// writes it; the rewrite (what `migrate patches upgrade` writes) plans.
func TestPin114ShowsTheHomelabPatchRewritten(t *testing.T) {
	t.Parallel()
	old, err := os.ReadFile("../../examples/homelab/patches/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := startNode(t, "v1.14.1")
	l.write(t, "patches/homelab.yaml", string(old))
	p := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.14.1")})
	cfg := obj(map[string]cty.Value{"patches": strs("patches/homelab.yaml")})
	r := plan(p, talos.MachineConfig, cfg)
	err = r.Diagnostics.Err()
	if err == nil {
		t.Fatal("the homelab's 1.13 patch planned for 1.14")
	}
	for _, want := range []string{"patches/homelab.yaml:37", "Patch Written For An Older Talos", "cluster.allowSchedulingOnControlPlanes (line 37) -> KubeNodeConfig",
		"--- patches/homelab.yaml\n+++ patches/homelab.yaml (Talos v1.14.1)", "-  allowSchedulingOnControlPlanes: true", "+kind: KubeNodeConfig", "+    $patch: delete",
		"migrate patches upgrade --to v1.14.1 --write"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the plan's refusal lacks %q:\n%v", want, err)
		}
	}
	up, err := talospatch.Upgrade(old, "v1.14.1")
	if err != nil {
		t.Fatal(err)
	}
	l.write(t, "patches/homelab.yaml", string(up.New))
	if r := plan(p, talos.MachineConfig, cfg); r.Diagnostics.HasErrors() {
		t.Fatalf("the rewritten patch does not plan: %v\n%s", r.Diagnostics.Err(), up.New)
	}
	if len(l.n.Applies()) != 1 { // the plan's dry run only
		t.Errorf("applies = %d, want the one dry run", len(l.n.Applies()))
	}
}

// A node upgraded from 1.13 keeps its 1.13 config; the first config
// rendered for 1.14 turns on what 1.14 generates by default. The plan
// warns of each (workload isolation, /var nosuid,nodev) with the patch
// that keeps the node as it was; with those patches it warns no more.
func TestPin114AfterUpgradeWarnsOfNewDefaults(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	ctx := context.Background()
	old := l.provider(t, nil)
	if r := apply(ctx, old, talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	p := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.14.1")})
	var log bytes.Buffer
	if r := apply(ctx, p, talos.Upgrade, obj(map[string]cty.Value{"version": cty.StringVal("v1.14.1")}), &log); r.Diagnostics.HasErrors() {
		t.Fatalf("upgrade: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	l.write(t, "patches/schedule.yaml", schedulePatch114)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/schedule.yaml")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("plan: %v", err)
	}
	var got []string
	for _, d := range pr.Diagnostics {
		got = append(got, d.Summary)
		if !strings.Contains(d.Detail, "To keep the node as it is, add to the patches") {
			t.Errorf("%s does not say what to set: %s", d.Summary, d.Detail)
		}
	}
	if strings.Join(got, ", ") != "Workload Isolation Turned On, EPHEMERAL Mounted nosuid,nodev" {
		t.Fatalf("warnings = %v", got)
	}
	if !strings.Contains(pr.Diagnostics[0].Detail, "kind: SecurityProfileConfig\nworkloadIsolation: false") || !strings.Contains(pr.Diagnostics[1].Detail, "name: EPHEMERAL\nmount:\n  secure: false") {
		t.Errorf("the patches to keep the node:\n%s\n%s", pr.Diagnostics[0].Detail, pr.Diagnostics[1].Detail)
	}
	l.write(t, "patches/keep113.yaml", "apiVersion: v1alpha1\nkind: SecurityProfileConfig\nworkloadIsolation: false\n---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nmount:\n  secure: false\n")
	pr = plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/schedule.yaml", "patches/keep113.yaml")}))
	if err := pr.Diagnostics.Err(); err != nil || len(pr.Diagnostics) != 0 {
		t.Errorf("with the patches that keep the node: %v %+v", err, pr.Diagnostics)
	}
}
