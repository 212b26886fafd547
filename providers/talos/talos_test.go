package talos_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v4"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// briefPatch is the brief's three-document patch.
const briefPatch = `# Newer Talos releases generate this document: set the hostname here,
# not in machine.network (both at once fail validation)
apiVersion: v1alpha1
kind: HostnameConfig
auto: "off"
hostname: lab-node
---
# the host's RAID volume through virtiofs, mounted under /var/mnt/data
apiVersion: v1alpha1
kind: ExternalVolumeConfig
name: data
filesystemType: virtiofs
mount:
  virtiofs:
    tag: incus_data
---
# a separate disk for bulk data: chosen by size, never by /dev/sdX
apiVersion: v1alpha1
kind: UserVolumeConfig
name: bulk
provisioning:
  diskSelector:
    match: '!system_disk && disk.size > 149u * GiB && disk.size < 151u * GiB'
  minSize: 149GiB
  grow: true
filesystem:
  type: xfs
`

// lab is a running lab node and a runbook directory beside it.
type lab struct {
	n   *talosnode.Node
	dir string // the runbook directory
	id  *age.X25519Identity
}

func startNode(t *testing.T, version string) *lab {
	t.Helper()
	return startNodeWith(t, talosnode.Options{Version: version})
}

// startNodeWith starts a lab node with these options (Dir, ClusterName and
// Hostname are the fixture's).
func startNodeWith(t *testing.T, opts talosnode.Options) *lab {
	t.Helper()
	opts.Dir, opts.ClusterName, opts.Hostname = t.TempDir(), "lab", "lab-node"
	if opts.Extensions == nil {
		opts.Extensions = labFactory
	}
	n, err := talosnode.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	l := &lab{n: n, dir: t.TempDir(), id: id}
	l.write(t, "identity.txt", id.String()+"\n")
	l.write(t, "patches/node.yaml", briefPatch)
	return l
}

// labFactory is the Image Factory's view of the installer images the
// tests name: the provider block's schematic (siderolabs/i915) carries
// i915, any other none.
func labFactory(image string) []string {
	if talosnode.SchematicOf(image) == talos.ExtensionsSchematicID("siderolabs/i915") {
		return []string{"siderolabs/i915"}
	}
	return nil
}

func (l *lab) write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(l.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// providerConfig is the provider block for the node, plain files.
func (l *lab) providerConfig(extra map[string]cty.Value) cty.Value {
	m := map[string]cty.Value{
		"talosconfig":      cty.StringVal(l.n.TalosconfigPath()),
		"secrets":          cty.StringVal(l.n.SecretsPath()),
		"version":          cty.StringVal("v1.13.3"),
		"cluster_name":     cty.StringVal("lab"),
		"cluster_endpoint": cty.StringVal("https://127.0.0.1:6443"),
		"extensions":       cty.ListVal([]cty.Value{cty.StringVal("siderolabs/i915")}),
		"age_identity":     cty.StringVal("identity.txt"),
	}
	for k, v := range extra {
		if v == cty.NilVal {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return cty.ObjectVal(m)
}

func (l *lab) provider(t *testing.T, extra map[string]cty.Value) *talos.Provider {
	t.Helper()
	p := talos.New()
	t.Cleanup(func() { _ = p.Close() })
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Config: l.providerConfig(extra), Dir: l.dir})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p
}

// bundleSecrets lists every secret of the node's secrets bundle, in the
// forms they could leak: tokens, and private keys as in a machine config.
func (l *lab) bundleSecrets(t *testing.T) []string {
	t.Helper()
	return bundleSecretsOf(t, l.n.SecretsPath())
}

// bundleSecretsOf lists the secrets of the bundle in a file.
func bundleSecretsOf(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var bundle secrets.Bundle
	if err := yaml.Unmarshal(b, &bundle); err != nil {
		t.Fatal(err)
	}
	out := []string{bundle.Cluster.Secret, bundle.Secrets.BootstrapToken, bundle.TrustdInfo.Token}
	if s := bundle.Secrets.SecretboxEncryptionSecret; s != "" {
		out = append(out, s)
	}
	if s := bundle.Secrets.AESCBCEncryptionSecret; s != "" {
		out = append(out, s)
	}
	for _, k := range [][]byte{bundle.Certs.OS.Key, bundle.Certs.K8s.Key, bundle.Certs.Etcd.Key, bundle.Certs.K8sAggregator.Key, bundle.Certs.K8sServiceAccount.Key} {
		out = append(out, base64.StdEncoding.EncodeToString(k))
		lines := strings.Split(string(k), "\n")
		if len(lines) > 1 {
			out = append(out, lines[1])
		}
	}
	return out
}

func assertNoSecrets(t *testing.T, where, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s shows a secret of the bundle (%.12s...):\n%s", where, s, text)
		}
	}
	if strings.Contains(text, "PRIVATE KEY") || strings.Contains(text, "AGE-SECRET-KEY") {
		t.Errorf("%s shows private key material:\n%s", where, text)
	}
}

func obj(m map[string]cty.Value) cty.Value { return cty.ObjectVal(m) }

func strs(s ...string) cty.Value {
	if len(s) == 0 {
		return cty.ListValEmpty(cty.String)
	}
	v := make([]cty.Value, len(s))
	for i, x := range s {
		v[i] = cty.StringVal(x)
	}
	return cty.ListVal(v)
}

func verify(services []string, files map[string]string) cty.Value {
	fm := map[string]cty.Value{}
	for k, v := range files {
		fm[k] = cty.StringVal(v)
	}
	fv := cty.MapValEmpty(cty.String)
	if len(fm) > 0 {
		fv = cty.MapVal(fm)
	}
	sv := cty.ListValEmpty(cty.String)
	if len(services) > 0 {
		sv = strs(services...)
	}
	return obj(map[string]cty.Value{"services": sv, "files": fv, "kubernetes": cty.False})
}

var mcAddr = phases.Address{Type: talos.MachineConfig, Name: "node"}

func plan(p *talos.Provider, typ string, cfg cty.Value) providers.PlanResponse {
	return p.Plan(context.Background(), providers.PlanRequest{Type: typ, Addr: phases.Address{Type: typ, Name: "node"}, Config: cfg, Action: providers.Create})
}

func apply(ctx context.Context, p *talos.Provider, typ string, cfg cty.Value, log *bytes.Buffer) providers.ApplyResponse {
	return p.Apply(ctx, providers.ApplyRequest{Type: typ, Addr: phases.Address{Type: typ, Name: "node"}, Config: cfg, Log: log})
}

func TestSchematicIDGolden(t *testing.T) {
	t.Parallel()
	empty, err := talos.SchematicID("")
	if err != nil {
		t.Fatal(err)
	}
	if want := "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"; empty != want {
		t.Errorf("empty schematic ID = %s, want %s", empty, want)
	}
	i915 := "dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee"
	if got := talos.ExtensionsSchematicID("siderolabs/i915"); got != i915 {
		t.Errorf("i915 schematic ID = %s, want %s", got, i915)
	}
	got, err := talos.SchematicID("customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/i915]\n")
	if err != nil || got != i915 {
		t.Errorf("i915 schematic as YAML: ID = %s (%v), want %s", got, err, i915)
	}
	if _, err := talos.SchematicID("customisation: {}\n"); err == nil {
		t.Error("a schematic with an unknown field was accepted")
	}
	if img := talos.InstallerImage(i915, "1.13.3"); img != "factory.talos.dev/metal-installer/"+i915+":v1.13.3" {
		t.Errorf("installer image = %s", img)
	}
}

func TestPlanShowsRedactedDryRunDiffWithPinnedImage(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "rendered": cty.StringVal("rendered/controlplane.yaml")})
	r := plan(p, talos.MachineConfig, cfg)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	image := "factory.talos.dev/metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3"
	for _, want := range []string{"config diff", image, "ExternalVolumeConfig", "UserVolumeConfig", "ghcr.io/siderolabs/installer:v1.13.3"} {
		if !strings.Contains(r.Diff, want) {
			t.Errorf("the plan diff lacks %q:\n%s", want, r.Diff)
		}
	}
	assertNoSecrets(t, "the plan diff", r.Diff, l.bundleSecrets(t))
	for _, a := range l.n.Applies() {
		if !a.DryRun {
			t.Errorf("Plan made a real apply: %+v", a)
		}
	}
	if _, err := os.Stat(filepath.Join(l.dir, "rendered")); !os.IsNotExist(err) {
		t.Errorf("plan wrote the rendered config: %v", err)
	}
}

// tree lists the files under dir with their size and time: what a
// command without side effects leaves as it was.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		out[p] = fmt.Sprint(fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
		return nil
	})
	return out
}

// TestRenderedOnlyDuringApply: plan writes nothing in the runbook's
// directory; apply writes the rendered config 0600 with the bundle's
// secrets redacted, or as sent with rendered_secrets = "include".
func TestRenderedOnlyDuringApply(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	bundle := l.bundleSecrets(t)
	for _, tc := range []struct{ file, secrets string }{{"rendered/redacted.yaml", "redact"}, {"rendered/full.yaml", "include"}} {
		cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "rendered": cty.StringVal(tc.file),
			"rendered_secrets": cty.StringVal(tc.secrets), "try_timeout": cty.StringVal("10s")})
		before := tree(t, l.dir)
		if r := plan(p, talos.MachineConfig, cfg); r.Diagnostics.HasErrors() {
			t.Fatalf("plan: %v", r.Diagnostics.Err())
		}
		if after := tree(t, l.dir); !maps.Equal(before, after) {
			t.Errorf("plan changed the runbook directory:\nbefore %v\nafter  %v", before, after)
		}
		var log bytes.Buffer
		if r := apply(context.Background(), p, talos.MachineConfig, cfg, &log); r.Diagnostics.HasErrors() {
			t.Fatalf("apply: %v\n%s", r.Diagnostics.Err(), log.String())
		}
		path := filepath.Join(l.dir, tc.file)
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("rendered config: %v, %v (want mode 0600)", fi, err)
		}
		b, _ := os.ReadFile(path)
		if tc.secrets == "redact" {
			assertNoSecrets(t, tc.file, string(b), bundle)
			if !strings.Contains(string(b), "machine:") || !strings.Contains(string(b), phases.Redacted) {
				t.Errorf("%s is not a redacted machine config:\n%s", tc.file, b)
			}
		} else {
			n := 0
			for _, s := range bundle {
				if strings.Contains(string(b), s) {
					n++
				}
			}
			if !strings.Contains(string(b), bundle[0]) || n < len(bundle)/2 {
				t.Errorf("%s lacks the bundle's secrets (%d of %d) with rendered_secrets = include", tc.file, n, len(bundle))
			}
		}
	}
	bad := obj(map[string]cty.Value{"rendered_secrets": cty.StringVal("clear")})
	if r := plan(p, talos.MachineConfig, bad); !strings.Contains(fmt.Sprint(r.Diagnostics.Err()), `"redact" or "include"`) {
		t.Errorf("a bad rendered_secrets: %v", r.Diagnostics.Err())
	}
}

func TestHostnameConflictNamesBothFilesAndLines(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	l.write(t, "patches/legacy.yaml", "# old style\nmachine:\n  network:\n    hostname: other-name\n")
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/legacy.yaml")}))
	if len(r.Diagnostics) != 1 {
		t.Fatalf("want one diagnostic, got %v", r.Diagnostics)
	}
	d := r.Diagnostics[0]
	for _, want := range []string{"patches/node.yaml:6", "patches/legacy.yaml:4", "static hostname is already set in v1alpha1 config"} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("the diagnostic lacks %q: %s: %s", want, d.Summary, d.Detail)
		}
	}
	if d.Subject == nil || d.Subject.Filename != "patches/node.yaml" || d.Subject.StartLine != 6 {
		t.Errorf("subject = %+v, want patches/node.yaml line 6", d.Subject)
	}
	if len(l.n.Applies()) != 0 {
		t.Error("something was sent to the node for an invalid config")
	}
}

func TestCELTypoPointsAtMatch(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	l.write(t, "patches/typo.yaml", strings.Replace(briefPatch, "151u * GiB'", "151u * GiBB'", 1))
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/typo.yaml")}))
	if len(r.Diagnostics) != 1 {
		t.Fatalf("want one diagnostic, got %v", r.Diagnostics)
	}
	d := r.Diagnostics[0]
	if d.Subject == nil || d.Subject.Filename != "patches/typo.yaml" || d.Subject.StartLine != 23 {
		t.Errorf("subject = %+v, want patches/typo.yaml line 23 (match:)", d.Subject)
	}
	if !strings.Contains(d.Detail, "undeclared reference to 'GiBB'") || !strings.Contains(d.Detail, "patches/typo.yaml:23") {
		t.Errorf("detail: %s", d.Detail)
	}
}

func TestUnparseablePatchNamesFile(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	l.write(t, "patches/bad.yaml", "kind: NoSuchDocument\nfoo: [\n")
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/bad.yaml", "patches/missing.yaml")}))
	if len(r.Diagnostics) != 2 {
		t.Fatalf("want two diagnostics, got %v", r.Diagnostics)
	}
	for i, name := range []string{"patches/bad.yaml", "patches/missing.yaml"} {
		d := r.Diagnostics[i]
		if d.Subject == nil || d.Subject.Filename != name || !strings.Contains(d.Detail, name) {
			t.Errorf("diagnostic %d does not name %s: %+v %s", i, name, d.Subject, d.Detail)
		}
	}
}

func TestChangeNeedingRebootRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	l.write(t, "patches/env.yaml", "machine:\n  env:\n    HTTP_PROXY: http://proxy:3128\n")
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/env.yaml")}))
	err := r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "mode = \"auto\"") {
		t.Fatalf("want a refusal naming mode = \"auto\", got %v", err)
	}
	assertNoSecrets(t, "the diagnostics", err.Error(), l.bundleSecrets(t))
	r = plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/env.yaml"), "mode": cty.StringVal("auto")}))
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("mode = auto: %v", err)
	}
	if !strings.Contains(r.Diff, "needs a reboot") {
		t.Errorf("the plan does not say a reboot is needed:\n%s", r.Diff)
	}
}

func TestVersionSkewRefused(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	p := l.provider(t, nil)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	pr := plan(p, talos.MachineConfig, cfg)
	var log bytes.Buffer
	ar := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	for what, d := range map[string]phases.Diagnostics{"Plan": pr.Diagnostics, "Apply": ar.Diagnostics} {
		err := d.Err()
		if err == nil {
			t.Fatalf("%s on a v1.13.2 node with version = v1.13.3 succeeded", what)
		}
		for _, want := range []string{"Talos Version Skew", "runs Talos v1.13.2", "silently", "version = \"v1.13.2\"", "talos_upgrade", ":v1.13.3"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the refusal lacks %q: %v", what, want, err)
			}
		}
	}
	if a := l.n.Applies(); len(a) != 0 {
		t.Errorf("the node received %d ApplyConfiguration calls despite the skew", len(a))
	}
}

func TestLadderPassingChecksConfirms(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	probe := filepath.Join(l.n.Root(), "var/mnt/data/.probe")
	if err := os.MkdirAll(filepath.Dir(probe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probe, []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := l.n.Config()
	p := l.provider(t, nil)
	cfg := obj(map[string]cty.Value{
		"patches":     strs("patches/node.yaml"),
		"try_timeout": cty.StringVal("30s"),
		"verify":      verify([]string{"apid", "kubelet"}, map[string]string{"/var/mnt/data/.probe": "ok"}),
	})
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	if bytes.Equal(l.n.Config(), before) || !bytes.Equal(l.n.PersistedConfig(), l.n.Config()) {
		t.Fatal("the node's config did not change for good")
	}
	var modes []string
	for _, a := range l.n.Applies() {
		modes = append(modes, a.Mode)
	}
	if got := strings.Join(modes, ","); got != "TRY,NO_REBOOT" {
		t.Errorf("apply modes = %s, want TRY,NO_REBOOT", got)
	}
	if l.n.TryPending() {
		t.Error("a TRY is still pending after the confirm")
	}
	out := r.Outputs.AsValueMap()
	if !strings.HasSuffix(out["installer_image"].AsString(), ":v1.13.3") || len(out["config_hash"].AsString()) != 64 {
		t.Errorf("outputs = %#v", r.Outputs)
	}
	if r.Revert == nil {
		t.Fatal("no revert data")
	}
	inv, _ := json.Marshal(r.Revert)
	sec := l.bundleSecrets(t)
	assertNoSecrets(t, "the revert data", string(inv), sec)
	assertNoSecrets(t, "the log", log.String(), sec)
	if !strings.Contains(string(inv), l.id.Recipient().String()) || !strings.Contains(string(inv), "BEGIN AGE ENCRYPTED FILE") {
		t.Errorf("the revert data is not sealed to the identity's recipient: %s", inv)
	}

	// Read: the node holds the rendered config.
	prior := &providers.Prior{Outputs: r.Outputs, Revert: r.Revert}
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	if rr.Observation != providers.Present {
		t.Errorf("Read after apply = %v %s %v", rr.Observation, rr.Detail, rr.Diagnostics)
	}

	// Rollback re-applies the previous config through the same ladder.
	var rlog bytes.Buffer
	rv := p.Revert(context.Background(), providers.RevertRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Revert: *r.Revert, Outputs: r.Outputs, Log: &rlog})
	if err := rv.Diagnostics.Err(); err != nil {
		t.Fatalf("Revert: %v\n%s", err, rlog.String())
	}
	if !bytes.Equal(l.n.PersistedConfig(), before) || !bytes.Equal(l.n.Config(), before) {
		t.Error("rollback did not bring back the previous config")
	}
	assertNoSecrets(t, "the rollback log", rlog.String(), sec)
	rr = p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	if rr.Observation != providers.Drifted {
		t.Errorf("Read after rollback = %v", rr.Observation)
	}
	assertNoSecrets(t, "the drift detail", rr.Detail, sec)
}

func TestLadderFailingCheckLeavesTryToRevert(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	before := l.n.Config()
	p := l.provider(t, nil)
	cfg := obj(map[string]cty.Value{
		"patches":     strs("patches/node.yaml"),
		"try_timeout": cty.StringVal("3s"),
		"verify":      verify([]string{"apid"}, map[string]string{"/var/mnt/data/.probe": "ok"}),
	})
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	err := r.Diagnostics.Err()
	if err == nil || !strings.Contains(err.Error(), "reverts to its previous config by itself at") {
		t.Fatalf("want a failure saying the node reverts, got %v", err)
	}
	if !strings.Contains(log.String(), "dmesg of") {
		t.Errorf("the log has no dmesg tail:\n%s", log.String())
	}
	for _, a := range l.n.Applies() {
		if a.Mode != "TRY" && a.Mode != "REVERT" {
			t.Errorf("the TRY was confirmed or disturbed: %+v", a)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for l.n.TryPending() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !bytes.Equal(l.n.Config(), before) {
		t.Error("the node did not revert to its previous config")
	}
	assertNoSecrets(t, "the log", log.String(), l.bundleSecrets(t))
}

func TestCrashDuringTryThenResumeConverges(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	before := l.n.Config()
	cfg := obj(map[string]cty.Value{
		"patches":     strs("patches/node.yaml"),
		"try_timeout": cty.StringVal("20s"),
		"verify":      verify([]string{"apid"}, map[string]string{"/var/mnt/data/.probe": "ok"}),
	})
	// The checks hang once the TRY is sent (the etcd snapshot before it
	// asks ServiceList too), failing until then for want of the probe;
	// the process "crashes" (its context ends) before it confirms the TRY.
	hung := make(chan struct{})
	go func() {
		defer close(hung)
		for deadline := time.Now().Add(time.Minute); !l.n.TryPending() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		l.n.Hang("ServiceList")
	}()
	p1 := l.provider(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	r := apply(ctx, p1, talos.MachineConfig, cfg, &bytes.Buffer{})
	cancel()
	_ = p1.Close()
	if !r.Diagnostics.HasErrors() {
		t.Fatal("the interrupted apply succeeded")
	}
	if !l.n.TryPending() || !bytes.Equal(l.n.PersistedConfig(), before) {
		t.Fatal("expected a pending, unconfirmed TRY")
	}
	<-hung
	l.n.Reset()
	mustWrite(t, filepath.Join(l.n.Root(), "var/mnt/data/.probe"), "ok\n")

	// A new process: the step was never recorded, so Read says Absent...
	p2 := l.provider(t, nil)
	rr := p2.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg})
	if rr.Observation == providers.Present {
		t.Fatalf("Read during a pending TRY = %v", rr.Observation)
	}
	// ...and the re-run of the ladder converges.
	var log bytes.Buffer
	r = apply(context.Background(), p2, talos.MachineConfig, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("resumed Apply: %v\n%s", err, log.String())
	}
	if l.n.TryPending() || bytes.Equal(l.n.PersistedConfig(), before) || !bytes.Equal(l.n.PersistedConfig(), l.n.Config()) {
		t.Error("the resumed apply did not converge")
	}
	rr = p2.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: &providers.Prior{Outputs: r.Outputs}})
	if rr.Observation != providers.Present {
		t.Errorf("Read after the resumed apply = %v: %s", rr.Observation, rr.Detail)
	}
}

func TestAgeEncryptedTalosconfigAndSecrets(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	seal := func(src, name string) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := age.Encrypt(&buf, l.id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		w.Close()
		return l.write(t, name, buf.String())
	}
	tc := seal(l.n.TalosconfigPath(), "secrets/talosconfig.age")
	sb := seal(l.n.SecretsPath(), "secrets/secrets.yaml.age")

	// Without an identity the encrypted files cannot be read.
	p := talos.New()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Dir: l.dir, Config: l.providerConfig(map[string]cty.Value{
		"talosconfig": cty.StringVal("secrets/talosconfig.age"), "secrets": cty.StringVal("secrets/secrets.yaml.age"), "age_identity": cty.NilVal,
	})})
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "age-encrypted") {
		t.Errorf("Configure without an identity: %v", err)
	}

	p = l.provider(t, map[string]cty.Value{"talosconfig": cty.StringVal(tc), "secrets": cty.StringVal(sb)})
	var log bytes.Buffer
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "try_timeout": cty.StringVal("20s")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan with encrypted files: %v", err)
	}
	ar := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	if err := ar.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply with encrypted files: %v\n%s", err, log.String())
	}
	sec := append(l.bundleSecrets(t), strings.TrimSpace(l.id.String()))
	inv, _ := json.Marshal(ar.Revert)
	for where, text := range map[string]string{"diff": pr.Diff, "log": log.String(), "revert data": string(inv)} {
		assertNoSecrets(t, where, text, sec)
	}
}

func TestNoIdentityMeansIrreversibleWithReason(t *testing.T) {
	l := startNode(t, "v1.13.3")
	t.Setenv(talos.IdentityEnv, "")
	p := l.provider(t, map[string]cty.Value{"age_identity": cty.NilVal})
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "try_timeout": cty.StringVal("20s")}), &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if r.Revert != nil {
		t.Errorf("revert data without an age identity: %+v", r.Revert)
	}
	if !strings.Contains(log.String(), "no rollback") || !strings.Contains(log.String(), talos.IdentityEnv) {
		t.Errorf("the log does not say why there is no rollback:\n%s", log.String())
	}
}

func TestIdentityFromEnvironment(t *testing.T) {
	l := startNode(t, "v1.13.3")
	t.Setenv(talos.IdentityEnv, l.id.String())
	p := l.provider(t, map[string]cty.Value{"age_identity": cty.NilVal})
	r := apply(context.Background(), p, talos.MachineConfig, obj(map[string]cty.Value{"try_timeout": cty.StringVal("20s")}), &bytes.Buffer{})
	if err := r.Diagnostics.Err(); err != nil || r.Revert == nil {
		t.Fatalf("Apply with %s: %v, revert data %v", talos.IdentityEnv, err, r.Revert)
	}
}

func TestBootstrapKubeconfigServicesRead(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	ctx := context.Background()

	// etcd is not healthy before the bootstrap: the check waits for it
	// within its timeout, then names the service and its last state.
	svc := obj(map[string]cty.Value{"services": strs("etcd", "apid")})
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r := apply(short, p, talos.ServiceHealth, svc, &bytes.Buffer{}); !r.Diagnostics.HasErrors() ||
		!strings.Contains(r.Diagnostics.Err().Error(), "etcd: Preparing") || strings.Contains(r.Diagnostics.Err().Error(), "apid") {
		t.Errorf("service health before bootstrap: %v", r.Diagnostics.Err())
	}
	for i := range 2 { // the second time the node is already bootstrapped
		var log bytes.Buffer
		r := apply(ctx, p, talos.Bootstrap, cty.EmptyObjectVal, &log)
		if err := r.Diagnostics.Err(); err != nil {
			t.Fatalf("bootstrap %d: %v", i, err)
		}
		if r.Revert != nil {
			t.Error("bootstrap returned revert data")
		}
		// Right after the bootstrap etcd is still starting, as on a node:
		// the step is done only when it runs healthy.
		if i == 0 && (!strings.Contains(log.String(), "waiting for etcd: Preparing") || !strings.Contains(log.String(), "etcd running and healthy")) {
			t.Errorf("the bootstrap did not wait for etcd:\n%s", log.String())
		}
	}
	if !l.n.Bootstrapped() {
		t.Error("the node is not bootstrapped")
	}
	var log bytes.Buffer
	if r := apply(ctx, p, talos.ServiceHealth, svc, &log); r.Diagnostics.HasErrors() || strings.Contains(log.String(), "waiting for") {
		t.Errorf("service health after bootstrap: %v\n%s", r.Diagnostics.Err(), log.String())
	}

	// In clear inside the runbook: refused, nothing written.
	clear := obj(map[string]cty.Value{"path": cty.StringVal("out/kubeconfig")})
	if r := apply(ctx, p, talos.Kubeconfig, clear, &bytes.Buffer{}); !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), "Kubeconfig In Clear") {
		t.Errorf("a clear kubeconfig inside the runbook: %v", r.Diagnostics.Err())
	}
	if _, err := os.Stat(filepath.Join(l.dir, "out/kubeconfig")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused kubeconfig was written: %v", err)
	}
	// Without the runbook's recipients, an age kubeconfig cannot be sealed.
	kc := obj(map[string]cty.Value{"path": cty.StringVal("out/kubeconfig.age")})
	if r := apply(ctx, p, talos.Kubeconfig, kc, &bytes.Buffer{}); !r.Diagnostics.HasErrors() || !strings.Contains(r.Diagnostics.Err().Error(), ".age-recipients") {
		t.Errorf("no recipients: %v", r.Diagnostics.Err())
	}
	if err := os.WriteFile(filepath.Join(l.dir, ".age-recipients"), []byte(l.id.Recipient().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := apply(ctx, p, talos.Kubeconfig, kc, &bytes.Buffer{})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	path := filepath.Join(l.dir, "out/kubeconfig.age")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig file: %v %v", fi, err)
	}
	sealed, _ := os.ReadFile(path)
	if strings.Contains(string(sealed), "client-key-data") || !agefile.IsEncrypted(sealed) {
		t.Errorf("the kubeconfig is not age-encrypted:\n%.200s", sealed)
	}
	if b, err := agefile.Decrypt(sealed, l.id); err != nil || !strings.Contains(string(b), "clusters:") || !strings.Contains(string(b), "client-key-data") {
		t.Errorf("not a kubeconfig (%v):\n%s", err, b)
	}
	prior := &providers.Prior{Outputs: r.Outputs, Revert: r.Revert}
	if rr := p.Read(ctx, providers.ReadRequest{Type: talos.Kubeconfig, Addr: phases.Address{Type: talos.Kubeconfig, Name: "node"}, Config: kc, Prior: prior}); rr.Observation != providers.Present {
		t.Errorf("Read kubeconfig = %v", rr.Observation)
	}
	if rv := p.Revert(ctx, providers.RevertRequest{Type: talos.Kubeconfig, Config: kc, Revert: *r.Revert}); rv.Diagnostics.HasErrors() {
		t.Fatal(rv.Diagnostics.Err())
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("rollback left the kubeconfig")
	}

	// talos_read: the brief's virtiofs test.
	probe := filepath.Join(l.n.Root(), "var/mnt/data/test.txt")
	os.MkdirAll(filepath.Dir(probe), 0o755)
	os.WriteFile(probe, []byte("written by a pod\n"), 0o644)
	for _, tc := range []struct {
		cfg  map[string]cty.Value
		fail string
	}{
		{cfg: map[string]cty.Value{"expect": cty.StringVal("written by a pod")}},
		{cfg: map[string]cty.Value{"contains": cty.StringVal("by a pod")}},
		{cfg: map[string]cty.Value{"expect": cty.StringVal("something else")}, fail: "not the expected"},
		{cfg: map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/nope")}, fail: "NotFound"},
		// The brief's discovery, said so that a person understands it.
		{cfg: map[string]cty.Value{"contains": cty.StringVal("i915"), "error_message": cty.StringVal("No Intel iGPU on the node")},
			fail: "talos_read.node: No Intel iGPU on the node\nWhat was read: /var/mnt/data/test.txt (17 bytes) does not contain \"i915\""},
		{cfg: map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/nope"), "error_message": cty.StringVal("The data share is not mounted")},
			fail: "The data share is not mounted\nWhat was read:"},
	} {
		m := map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/test.txt")}
		for k, v := range tc.cfg {
			m[k] = v
		}
		r := apply(ctx, p, talos.Read, obj(m), &bytes.Buffer{})
		err := r.Diagnostics.Err()
		if tc.fail == "" && err != nil || tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)) {
			t.Errorf("talos_read %v: %v (want failure %q)", tc.cfg, err, tc.fail)
		}
	}
}

func TestUpgradeIsTheExplicitWayAndReverts(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.2")
	// The pin says what the cluster will run after the upgrade; the skew
	// guard does not stop the upgrade itself.
	p := l.provider(t, nil)
	ctx := context.Background()
	if r := apply(ctx, p, talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{}); !r.Diagnostics.HasErrors() {
		t.Error("bootstrap on a node running another version than the pin was not refused")
	}
	// Bootstrap under the old pin, as the cluster was built.
	old := l.provider(t, map[string]cty.Value{"version": cty.StringVal("v1.13.2")})
	if r := apply(ctx, old, talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	cfg := obj(map[string]cty.Value{"version": cty.StringVal("v1.13.3")})
	pr := plan(p, talos.Upgrade, cfg)
	if err := pr.Diagnostics.Err(); err != nil || !strings.Contains(pr.Diff, "metal-installer/dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee:v1.13.3") {
		t.Fatalf("plan: %v\n%s", err, pr.Diff)
	}
	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, log.String())
	}
	if v := l.n.Version(); v != "v1.13.3" {
		t.Fatalf("node version after upgrade = %s", v)
	}
	if r.Revert == nil || !strings.Contains(r.Revert.Description, "v1.13.2") {
		t.Fatalf("revertOf = %+v", r.Revert)
	}
	addr := phases.Address{Type: talos.Upgrade, Name: "node"}
	if rr := p.Read(ctx, providers.ReadRequest{Type: talos.Upgrade, Addr: addr, Config: cfg, Prior: &providers.Prior{}}); rr.Observation != providers.Present {
		t.Errorf("Read after upgrade = %v", rr.Observation)
	}
	if rv := p.Revert(ctx, providers.RevertRequest{Type: talos.Upgrade, Addr: addr, Config: cfg, Revert: *r.Revert, Log: &log}); rv.Diagnostics.HasErrors() {
		t.Fatalf("revert: %v\n%s", rv.Diagnostics.Err(), log.String())
	}
	if v := l.n.Version(); v != "v1.13.2" {
		t.Errorf("node version after revert = %s", v)
	}
	// The revert runs again after a kill (Resumed): the node is on the
	// version already, so no second reinstall (an upgrade would fail).
	l.n.Fail("Upgrade", errors.New("a second reinstall"))
	if rv := p.Revert(ctx, providers.RevertRequest{Type: talos.Upgrade, Addr: addr, Config: cfg, Revert: *r.Revert, Resumed: true, Log: &log}); rv.Diagnostics.HasErrors() {
		t.Errorf("resumed revert: %v\n%s", rv.Diagnostics.Err(), log.String())
	}
}

func TestUnknownAndNullConfigsDoNotFail(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": cty.UnknownVal(cty.List(cty.String))}))
	if err := r.Diagnostics.Err(); err != nil || !strings.Contains(r.Diff, "known after") {
		t.Errorf("unknown patches: %v %q", err, r.Diff)
	}
	if r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"mode": cty.StringVal("sometimes")})); !r.Diagnostics.HasErrors() {
		t.Error("an invalid mode was accepted")
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInputDigestFollowsPatchFiles: the step's attributes name patch
// files; a change in a file must change the step's input digest, so that
// the plan says update rather than leaving it to drift detection.
func TestInputDigestFollowsPatchFiles(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml")})
	digest := func() string {
		t.Helper()
		r := p.InputDigest(context.Background(), providers.DigestRequest{Type: talos.MachineConfig, Addr: phases.Address{Type: talos.MachineConfig, Name: "node"}, Config: cfg})
		if err := r.Diagnostics.Err(); err != nil || r.Unknown {
			t.Fatalf("InputDigest: %v unknown=%v", err, r.Unknown)
		}
		return r.Digest
	}
	first := digest()
	if first == "" || digest() != first {
		t.Fatalf("digest %q is not stable", first)
	}
	path := filepath.Join(l.dir, "patches/node.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, path, strings.Replace(string(b), "hostname: lab-node", "hostname: talos-home", 1))
	if digest() == first {
		t.Error("changing a patch file did not change the digest")
	}
	unknown := obj(map[string]cty.Value{"patches": cty.UnknownVal(cty.List(cty.String))})
	if r := p.InputDigest(context.Background(), providers.DigestRequest{Type: talos.MachineConfig, Config: unknown}); !r.Unknown {
		t.Error("unknown patches must give an unknown digest")
	}
}

// TestServiceHealthWaitsForEtcd: bootstrapped behind the provider's back
// (as talosctl bootstrap would), etcd is still starting: the check waits
// until it runs healthy instead of failing at once.
func TestServiceHealthWaitsForEtcd(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := clientconfig.Open(l.n.TalosconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	mc, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := mc.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if r := apply(ctx, p, talos.ServiceHealth, obj(map[string]cty.Value{"services": strs("etcd")}), &log); r.Diagnostics.HasErrors() {
		t.Errorf("service health after bootstrap: %v", r.Diagnostics.Err())
	}
	if !strings.Contains(log.String(), "waiting for etcd: Preparing") || !strings.Contains(log.String(), "running and healthy") {
		t.Errorf("service health right after bootstrap did not wait for etcd: %s", log.String())
	}
}

// TestBootstrapWaitTimesOut: etcd that does not come up within the
// step's timeout fails the bootstrap, naming its last state; the next
// run finds the node bootstrapped and waits again.
func TestBootstrapWaitTimesOut(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.3", EtcdStartup: 4 * time.Second})
	p := l.provider(t, nil)
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	r := apply(short, p, talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{})
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Etcd Not Healthy") || !strings.Contains(err.Error(), "etcd: Preparing") {
		t.Fatalf("bootstrap with etcd still starting: %v", err)
	}
	if !l.n.Bootstrapped() {
		t.Fatal("the node is not bootstrapped")
	}
	var log bytes.Buffer
	if r := apply(context.Background(), p, talos.Bootstrap, cty.EmptyObjectVal, &log); r.Diagnostics.HasErrors() {
		t.Fatalf("the second bootstrap: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	if !strings.Contains(log.String(), "already bootstrapped") || !strings.Contains(log.String(), "etcd running and healthy") {
		t.Errorf("the second bootstrap did not wait for etcd:\n%s", log.String())
	}
}
