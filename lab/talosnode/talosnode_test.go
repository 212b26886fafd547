package talosnode_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cryptox509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// briefPatch is the brief's three-document patch (seed).
const briefPatch = `apiVersion: v1alpha1
kind: HostnameConfig
auto: "off"
hostname: lab-node
---
apiVersion: v1alpha1
kind: ExternalVolumeConfig
name: data
filesystemType: virtiofs
mount:
  virtiofs:
    tag: incus_data
---
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

func startNode(t *testing.T, opts talosnode.Options) *talosnode.Node {
	t.Helper()

	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}

	if opts.RebootDuration == 0 {
		opts.RebootDuration = 300 * time.Millisecond
	}

	n, err := talosnode.New(opts)
	if err != nil {
		t.Fatal(err)
	}

	if err = n.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(n.Stop)

	return n
}

// connect is how a user connects: the talosconfig file, nodes from its context.
func connect(t *testing.T, n *talosnode.Node) (*client.Client, context.Context) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	cfg, err := clientconfig.Open(n.TalosconfigPath())
	if err != nil {
		t.Fatal(err)
	}

	c, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c, client.WithNodes(ctx, cfg.Contexts[cfg.Context].Nodes...)
}

func patch(t *testing.T, base []byte, patches ...string) []byte {
	t.Helper()

	var ps []configpatcher.Patch

	for _, p := range patches {
		lp, err := configpatcher.LoadPatch([]byte(p))
		if err != nil {
			t.Fatal(err)
		}

		ps = append(ps, lp)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(base), ps)
	if err != nil {
		t.Fatal(err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func apply(ctx context.Context, c *client.Client, data []byte, mode machine.ApplyConfigurationRequest_Mode, dryRun bool, try time.Duration) (*machine.ApplyConfigurationResponse, error) {
	req := &machine.ApplyConfigurationRequest{Data: data, Mode: mode, DryRun: dryRun}
	if try > 0 {
		req.TryModeTimeout = durationpb.New(try)
	}

	return c.ApplyConfiguration(ctx, req)
}

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()

	if err == nil {
		t.Fatalf("want %s error, got nil", code)
	}

	if got := client.StatusCode(err); got != code {
		t.Fatalf("want code %s, got %s (%v)", code, got, err)
	}

	if contains != "" && !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not contain %q", err, contains)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}

		time.Sleep(20 * time.Millisecond)
	}
}

func readAll(ctx context.Context, c *client.Client, path string) ([]byte, error) {
	r, err := c.Read(ctx, path)
	if err != nil {
		return nil, err
	}
	defer r.Close() //nolint:errcheck

	return io.ReadAll(r)
}

func TestVersion(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	resp, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}

	m := resp.Messages[0]
	if m.Version.Tag != "v1.13.3" || n.Version() != "v1.13.3" {
		t.Errorf("tag %q, node %q", m.Version.Tag, n.Version())
	}

	if m.Platform.GetName() != "metal" || m.Platform.GetMode() != "metal" {
		t.Errorf("platform %v", m.Platform)
	}

	if m.Metadata.GetHostname() != "127.0.0.1" {
		t.Errorf("metadata hostname %q, want the node name the client used", m.Metadata.GetHostname())
	}

	// "node" (one-to-one) with the node's hostname works too
	resp, err = c.Version(client.WithNode(ctx, "lab-node"))
	if err != nil {
		t.Fatal(err)
	}

	if resp.Messages[0].Metadata.GetHostname() != "lab-node" {
		t.Errorf("hostname %q", resp.Messages[0].Metadata.GetHostname())
	}

	// another node: apid cannot reach it
	_, err = c.Version(client.WithNode(ctx, "10.9.9.9"))
	wantCode(t, err, codes.Unavailable, "10.9.9.9")

	// a target with a port is not a node name
	_, err = c.Version(client.WithNode(ctx, n.Addr()))
	wantCode(t, err, codes.Internal, "invalid target")
}

func TestApplyDryRunShowsDiff(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	before := n.Config()

	resp, err := apply(ctx, c, patch(t, before, briefPatch), machine.ApplyConfigurationRequest_AUTO, true, 0)
	if err != nil {
		t.Fatal(err)
	}

	m := resp.Messages[0]
	for _, want := range []string{"Dry run summary:", "Applied configuration without a reboot (skipped in dry-run).", "Config diff:", "+kind: ExternalVolumeConfig", "+kind: UserVolumeConfig", "-auto: stable", "+hostname: lab-node"} {
		if !strings.Contains(m.ModeDetails, want) {
			t.Errorf("dry-run details lack %q:\n%s", want, m.ModeDetails)
		}
	}

	if m.Mode != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Errorf("AUTO resolved to %s, want NO_REBOOT (new documents apply immediately)", m.Mode)
	}

	if !bytes.Equal(n.Config(), before) || !bytes.Equal(n.PersistedConfig(), before) {
		t.Error("dry run changed the config")
	}

	if a := n.Applies(); len(a) != 1 || !a[0].DryRun || a[0].Mode != "AUTO" || a[0].EffectiveMode != "NO_REBOOT" {
		t.Errorf("applies %+v", a)
	}

	// no change at all
	resp, err = apply(ctx, c, before, machine.ApplyConfigurationRequest_NO_REBOOT, true, 0)
	if err != nil {
		t.Fatal(err)
	}

	if !strings.HasSuffix(resp.Messages[0].ModeDetails, "Config diff:\n\nNo changes.") {
		t.Errorf("details %q", resp.Messages[0].ModeDetails)
	}
}

func TestInvalidConfigRejected(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	base := n.Config()

	conflict := patch(t, base, briefPatch, "machine:\n  network:\n    hostname: other\n")
	_, err := apply(ctx, c, conflict, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument, "static hostname is already set in v1alpha1 config")

	typo := patch(t, base, strings.Replace(briefPatch, "151u * GiB", "151u * GiBB", 1))
	_, err = apply(ctx, c, typo, machine.ApplyConfigurationRequest_NO_REBOOT, true, 0)
	wantCode(t, err, codes.InvalidArgument, "undeclared reference to 'GiBB'")

	_, err = apply(ctx, c, []byte("not: [a config"), machine.ApplyConfigurationRequest_AUTO, false, 0)
	wantCode(t, err, codes.InvalidArgument, "")

	// only extra documents, no v1alpha1
	_, err = apply(ctx, c, []byte(strings.SplitN(briefPatch, "---\n", 2)[0]), machine.ApplyConfigurationRequest_AUTO, false, 0)
	wantCode(t, err, codes.InvalidArgument, "doesn't contain v1alpha1 config")

	// Kubernetes newer than the node's Talos supports
	tooNew := patch(t, base, "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.99.0\n")
	_, err = apply(ctx, c, tooNew, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument, "kubelet image is not valid")

	if !bytes.Equal(n.Config(), base) {
		t.Error("a rejected config changed the node")
	}

	for _, a := range n.Applies() {
		if a.Err == "" {
			t.Errorf("rejected apply recorded without error: %+v", a)
		}
	}
}

func TestTryRevertsAfterTimeout(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	before := n.Config()
	next := patch(t, before, briefPatch)

	resp, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_TRY, false, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}

	if want := "will be automatically reverted back in 400ms"; !strings.Contains(resp.Messages[0].ModeDetails, want) {
		t.Errorf("details %q lack %q", resp.Messages[0].ModeDetails, want)
	}

	if !bytes.Equal(n.Config(), next) || !n.TryPending() {
		t.Fatal("TRY config is not running")
	}

	// a TRY is in memory only: the config on disk is the old one
	onDisk, err := readAll(ctx, c, talosnode.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(onDisk, before) {
		t.Error("TRY persisted the config")
	}

	eventually(t, 5*time.Second, "revert", func() bool { return bytes.Equal(n.Config(), before) })

	a := n.Applies()
	if last := a[len(a)-1]; last.Mode != "REVERT" {
		t.Errorf("last record %+v, want REVERT", last)
	}

	if !dmesgContains(t, ctx, c, "rolling back the configuration") {
		t.Error("dmesg lacks the rollback")
	}
}

func TestTryThenNoRebootConfirms(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	next := patch(t, n.Config(), briefPatch)

	if _, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_TRY, false, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	resp, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	if resp.Messages[0].ModeDetails != "Applied configuration without a reboot" {
		t.Errorf("details %q", resp.Messages[0].ModeDetails)
	}

	time.Sleep(700 * time.Millisecond)

	if !bytes.Equal(n.Config(), next) || !bytes.Equal(n.PersistedConfig(), next) || n.TryPending() {
		t.Error("NO_REBOOT did not confirm the TRY")
	}
}

// On v1.13 any non-TRY request, even a dry run, cancels a pending rollback
// (siderolabs/talos#14343); TryRollbackFix models the fixed behaviour.
func TestDryRunDuringTry(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		n := startNode(t, talosnode.Options{TryRollbackFix: fixed})
		c, ctx := connect(t, n)
		before := n.Config()
		next := patch(t, before, briefPatch)

		if _, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_TRY, false, 400*time.Millisecond); err != nil {
			t.Fatal(err)
		}

		if _, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_AUTO, true, 0); err != nil {
			t.Fatal(err)
		}

		time.Sleep(700 * time.Millisecond)

		reverted := bytes.Equal(n.Config(), before)
		if reverted != fixed {
			t.Errorf("TryRollbackFix=%v: reverted=%v", fixed, reverted)
		}

		if !bytes.Equal(n.PersistedConfig(), before) {
			t.Error("dry run persisted the TRY config")
		}
	}
}

func TestAutoRebootAndStaged(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	before := n.Config()
	next := patch(t, before, "machine:\n  env:\n    LAB: \"1\"\n")

	// machine.env cannot change without a reboot
	_, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument, "this config change can't be applied in immediate mode")

	_, err = apply(ctx, c, next, machine.ApplyConfigurationRequest_TRY, false, time.Minute)
	wantCode(t, err, codes.InvalidArgument, "immediate mode")

	// STAGED: on disk now, running after the next reboot
	resp, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_STAGED, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	if resp.Messages[0].ModeDetails != "Staged configuration to be applied after the next reboot" {
		t.Errorf("details %q", resp.Messages[0].ModeDetails)
	}

	if !bytes.Equal(n.Config(), before) || !bytes.Equal(n.PersistedConfig(), next) {
		t.Fatal("STAGED changed the running config or did not persist")
	}

	bootID, err := readAll(ctx, c, talosnode.BootIDPath)
	if err != nil {
		t.Fatal(err)
	}

	if err = c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	waitReboot(t, ctx, c)

	if newID, err := readAll(ctx, c, talosnode.BootIDPath); err != nil || bytes.Equal(newID, bootID) {
		t.Errorf("boot id %q -> %q (%v)", bootID, newID, err)
	}

	if !bytes.Equal(n.Config(), next) {
		t.Error("staged config not running after reboot")
	}

	// AUTO answers REBOOT when needed and reboots
	next2 := patch(t, next, "machine:\n  env:\n    LAB: \"2\"\n")

	resp, err = apply(ctx, c, next2, machine.ApplyConfigurationRequest_AUTO, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	if m := resp.Messages[0]; m.Mode != machine.ApplyConfigurationRequest_REBOOT || !strings.HasPrefix(m.ModeDetails, "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
		t.Errorf("AUTO answered %s %q", m.Mode, m.ModeDetails)
	}

	waitReboot(t, ctx, c)

	if !bytes.Equal(n.Config(), next2) {
		t.Errorf("AUTO(REBOOT) config not running: persisted=%v applies=%+v", bytes.Equal(n.PersistedConfig(), next2), n.Applies())
	}

	if !dmesgContains(t, ctx, c, "apply config request: mode auto(reboot)") {
		t.Error("dmesg lacks the apply")
	}
}

// waitReboot sees the node go Unavailable and come back.
func waitReboot(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()

	sawDown := false

	eventually(t, 5*time.Second, "reboot", func() bool {
		_, err := c.Version(ctx)
		if client.StatusCode(err) == codes.Unavailable {
			sawDown = true
		}

		return sawDown && err == nil
	})
}

func TestRead(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	probe := filepath.Join(n.Root(), "var/mnt/data/.probe")
	if err := os.WriteFile(probe, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := readAll(ctx, c, "/var/mnt/data/.probe")
	if err != nil || string(got) != "ok" {
		t.Fatalf("read %q, %v", got, err)
	}

	// a big file comes in several chunks
	big := bytes.Repeat([]byte("0123456789"), 10000)
	if err = os.WriteFile(filepath.Join(n.Root(), "var/mnt/data/big"), big, 0o644); err != nil {
		t.Fatal(err)
	}

	if got, err = readAll(ctx, c, "/var/mnt/data/big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big read: %d bytes, %v", len(got), err)
	}

	_, err = readAll(ctx, c, "/var/mnt/data/missing")
	wantCode(t, err, codes.NotFound, "stat /var/mnt/data/missing: no such file or directory")

	// ".." stops at the node's "/": never the host's files
	_, err = readAll(ctx, c, "/var/mnt/data/../../../../../../etc/hostname")
	wantCode(t, err, codes.NotFound, "stat /etc/hostname")

	// a symlink out of the node root is refused
	if err = os.Symlink("/etc/hostname", filepath.Join(n.Root(), "var/mnt/data/escape")); err != nil {
		t.Fatal(err)
	}

	_, err = readAll(ctx, c, "/var/mnt/data/escape")
	wantCode(t, err, codes.PermissionDenied, "escapes")

	_, err = readAll(ctx, c, "/var/mnt/data")
	wantCode(t, err, codes.Unknown, "path must be a regular file")

	cfg, err := readAll(ctx, c, talosnode.ConfigPath)
	if err != nil || !bytes.Equal(cfg, n.PersistedConfig()) {
		t.Errorf("config read %d bytes, %v", len(cfg), err)
	}
}

func TestBootstrapTwice(t *testing.T) {
	n := startNode(t, talosnode.Options{EtcdStartup: 3 * time.Second}) // room for a slow machine
	c, ctx := connect(t, n)

	if etcd := service(t, ctx, c, "etcd"); etcd.State != "Preparing" || !etcd.Health.Unknown {
		t.Errorf("etcd before bootstrap: %v", etcd)
	}

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	// etcd takes a moment to start, as on a node: Preparing, then Running.
	if etcd := service(t, ctx, c, "etcd"); etcd.State != "Preparing" || !etcd.Health.Unknown {
		t.Errorf("etcd right after bootstrap: %v", etcd)
	}
	deadline := time.Now().Add(30 * time.Second)
	for etcd := service(t, ctx, c, "etcd"); etcd.State != "Running" || !etcd.Health.Healthy; etcd = service(t, ctx, c, "etcd") {
		if time.Now().After(deadline) {
			t.Fatalf("etcd after bootstrap: %v", etcd)
		}
		time.Sleep(50 * time.Millisecond)
	}

	err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, err, codes.AlreadyExists, "etcd data directory is not empty")

	for _, id := range []string{"apid", "machined", "trustd", "containerd", "kubelet"} {
		if s := service(t, ctx, c, id); !s.Health.Healthy {
			t.Errorf("%s not healthy: %v", id, s)
		}
	}
}

func service(t *testing.T, ctx context.Context, c *client.Client, id string) *machine.ServiceInfo {
	t.Helper()

	resp, err := c.ServiceList(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range resp.Messages[0].Services {
		if s.Id == id {
			return s
		}
	}

	t.Fatalf("service %q not listed", id)

	return nil
}

func TestKubeconfig(t *testing.T) {
	n := startNode(t, talosnode.Options{ClusterName: "homelab"})
	c, ctx := connect(t, n)

	b, err := c.Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var kc struct {
		Kind           string `yaml:"kind"`
		CurrentContext string `yaml:"current-context"`
		Clusters       []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server string `yaml:"server"`
				CA     string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			Name string `yaml:"name"`
			User struct {
				Crt string `yaml:"client-certificate-data"`
				Key string `yaml:"client-key-data"`
			} `yaml:"user"`
		} `yaml:"users"`
	}

	if err = yaml.Unmarshal(b, &kc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}

	if kc.Kind != "Config" || kc.CurrentContext != "admin@homelab" || len(kc.Clusters) != 1 || kc.Clusters[0].Name != "homelab" || kc.Clusters[0].Cluster.Server != "https://127.0.0.1:6443" || len(kc.Users) != 1 {
		t.Fatalf("kubeconfig:\n%s", b)
	}

	bundle, err := secrets.LoadBundle(n.SecretsPath())
	if err != nil {
		t.Fatal(err)
	}

	caPEM, _ := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CA)
	if !bytes.Equal(caPEM, bundle.Certs.K8s.Crt) {
		t.Error("CA is not the bundle's Kubernetes CA")
	}

	crtPEM, _ := base64.StdEncoding.DecodeString(kc.Users[0].User.Crt)
	block, _ := pem.Decode(crtPEM)
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	caBlock, _ := pem.Decode(caPEM)
	ca, _ := x509.ParseCertificate(caBlock.Bytes)

	if err = crt.CheckSignatureFrom(ca); err != nil {
		t.Errorf("admin cert not signed by the Kubernetes CA: %v", err)
	}

	if crt.Subject.CommonName != "admin" || len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:masters" {
		t.Errorf("admin cert subject %v", crt.Subject)
	}
}

func TestUntrustedClientRefused(t *testing.T) {
	n := startNode(t, talosnode.Options{})

	// a client certificate from another cluster's bundle
	other, err := secrets.NewBundle(secrets.NewClock(), nil)
	if err != nil {
		t.Fatal(err)
	}

	crt, err := other.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatal(err)
	}

	own, err := clientconfig.Open(n.TalosconfigPath())
	if err != nil {
		t.Fatal(err)
	}

	cfg := clientconfig.NewConfig("x", []string{n.Addr()}, mustB64(t, own.Contexts["lab"].CA), crt)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	if _, err = c.Version(ctx); err == nil {
		t.Fatal("untrusted client certificate accepted")
	}

	// a trusted os:reader may read the version but not apply configs
	rcrt, rkey, err := n.ClientCertificate(role.Reader)
	if err != nil {
		t.Fatal(err)
	}

	reader := clientconfig.NewConfig("r", []string{n.Addr()}, mustB64(t, own.Contexts["lab"].CA), &cryptox509.PEMEncodedCertificateAndKey{Crt: rcrt, Key: rkey})

	rc, err := client.New(ctx, client.WithConfig(reader))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close() //nolint:errcheck

	if _, err = rc.Version(ctx); err != nil {
		t.Fatalf("reader Version: %v", err)
	}

	_, err = apply(ctx, rc, n.Config(), machine.ApplyConfigurationRequest_NO_REBOOT, true, 0)
	wantCode(t, err, codes.PermissionDenied, "not authorized")
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()

	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func TestFailAndHang(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	n.Fail("Version", status.Error(codes.Internal, "boom"))

	_, err := c.Version(ctx)
	wantCode(t, err, codes.Internal, "boom")

	n.Fail("ApplyConfiguration", errors.New("disk on fire"))

	_, err = apply(ctx, c, n.Config(), machine.ApplyConfigurationRequest_NO_REBOOT, true, 0)
	wantCode(t, err, codes.Unknown, "disk on fire")

	n.Reset()

	if _, err = c.Version(ctx); err != nil {
		t.Fatal(err)
	}

	n.Hang("Version")

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()

	start := time.Now()
	_, err = c.Version(short)

	wantCode(t, err, codes.DeadlineExceeded, "")

	if time.Since(start) < 150*time.Millisecond {
		t.Error("Hang did not block")
	}

	// a hung stream: the raw stream reports the deadline
	n.Hang("Read")

	short2, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()

	stream, err := c.MachineClient.Read(short2, &machine.ReadRequest{Path: talosnode.ConfigPath})
	if err == nil {
		_, err = stream.Recv()
	}

	wantCode(t, err, codes.DeadlineExceeded, "")

	n.Reset()
}

// With "nodes" metadata apid answers one-to-many: node errors come back in
// the response metadata of a successful call.
func TestNodesMetadataErrors(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	resp, err := c.MachineClient.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("x: [")})
	if err != nil {
		t.Fatalf("one-to-many call failed at the gRPC level: %v", err)
	}

	md := resp.Messages[0].Metadata
	if md.GetError() == "" || codes.Code(md.GetStatus().GetCode()) != codes.InvalidArgument || md.GetHostname() != "127.0.0.1" {
		t.Errorf("metadata %v", md)
	}

	// the client helper turns it into an error naming the node
	_, err = apply(ctx, c, []byte("x: ["), machine.ApplyConfigurationRequest_AUTO, false, 0)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("FilterMessages error %v", err)
	}

	// streams: ReadStream turns the metadata error into a read error
	_, err = readAll(ctx, c, "/nope")
	wantCode(t, err, codes.NotFound, "no such file")
}

func TestUpgrade(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	image := "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.4"

	// a controlplane without etcd cannot pass the pre-upgrade etcd checks
	_, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image))
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("upgrade before bootstrap: %v", err)
	}

	if err = c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	resp, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage(image))
	if err != nil {
		t.Fatal(err)
	}

	if resp.Messages[0].Ack != "Upgrade request received" {
		t.Errorf("ack %q", resp.Messages[0].Ack)
	}

	waitReboot(t, ctx, c)

	v, err := c.Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != "v1.13.4" {
		t.Fatalf("version after upgrade %v, %v", v, err)
	}

	// the installed version survives a restart of the lab node
	if got := restart(t, n).Version(); got != "v1.13.4" {
		t.Errorf("version after restart %q", got)
	}

	_, err = c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer"))
	if err == nil {
		t.Error("upgrade to an image without a tag accepted")
	}
}

func restart(t *testing.T, n *talosnode.Node) *talosnode.Node {
	t.Helper()

	n.Stop()

	n2, err := talosnode.New(talosnode.Options{Dir: filepath.Dir(n.SecretsPath())})
	if err != nil {
		t.Fatal(err)
	}

	return n2
}

func TestRestartKeepsConfig(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)
	base := n.Config()
	next := patch(t, base, briefPatch)

	if _, err := apply(ctx, c, next, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	tried := patch(t, next, "machine:\n  nodeLabels:\n    lab: tried\n")
	if _, err := apply(ctx, c, tried, machine.ApplyConfigurationRequest_TRY, false, time.Minute); err != nil {
		t.Fatal(err)
	}

	n2 := restart(t, n)

	if !bytes.Equal(n2.Config(), next) {
		t.Error("restart: want the persisted NO_REBOOT config (a pending TRY is lost like on a reboot)")
	}

	b1, _ := os.ReadFile(n.SecretsPath())
	b2, _ := os.ReadFile(n2.SecretsPath())

	if !bytes.Equal(b1, b2) {
		t.Error("secrets regenerated on restart")
	}
}

func dmesgContains(t *testing.T, ctx context.Context, c *client.Client, s string) bool {
	t.Helper()

	stream, err := c.Dmesg(ctx, false, false)
	if err != nil {
		t.Fatal(err)
	}

	var all strings.Builder

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		if msg.Metadata.GetError() != "" {
			t.Fatal(msg.Metadata.GetError())
		}

		if !bytes.HasSuffix(msg.Bytes, []byte("\n")) {
			t.Fatalf("dmesg message without newline: %q", msg.Bytes)
		}

		all.Write(msg.Bytes)
	}

	return strings.Contains(all.String(), s)
}

func TestDmesgFollow(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err := c.Dmesg(fctx, true, false)
	if err != nil {
		t.Fatal(err)
	}

	// the whole ring first (the boot lines), then new lines as they come
	if _, err = stream.Recv(); err != nil {
		t.Fatal(err)
	}

	if err = c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	for {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}

		line := string(msg.Bytes)
		if strings.Contains(line, "bootstrap request received") {
			if !strings.HasPrefix(line, "user: warning: [") {
				t.Errorf("line format %q", line)
			}

			break
		}
	}
}

func TestUpgradeStagedAndRefused(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	c, ctx := connect(t, n)

	// a downgrade over several minors: the installer refuses, the node boots its old version
	if _, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.5.0"), client.WithUpgradeForce(true)); err != nil {
		t.Fatal(err)
	}

	waitReboot(t, ctx, c)

	if n.Version() != "v1.13.3" || !dmesgContains(t, ctx, c, "upgrade failed") {
		t.Errorf("version %s after a refused upgrade", n.Version())
	}

	// staged: installed at the next reboot only
	if _, err := c.UpgradeWithOptions(ctx, client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.13.4"), client.WithUpgradeForce(true), client.WithUpgradeStage(true)); err != nil {
		t.Fatal(err)
	}

	time.Sleep(200 * time.Millisecond)

	if n.Version() != "v1.13.3" {
		t.Fatalf("staged upgrade installed before the reboot: %s", n.Version())
	}

	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}

	waitReboot(t, ctx, c)

	if n.Version() != "v1.13.4" {
		t.Errorf("version %s after the reboot", n.Version())
	}
}

// TestHostPath: where a node path lives on the host (lab/kubecp mounts
// it into the pods it runs), never out of the node's filesystem.
func TestHostPath(t *testing.T) {
	n := startNode(t, talosnode.Options{})
	root, err := filepath.EvalSymlinks(n.Root())
	if err != nil {
		t.Fatal(err)
	}

	if err = os.MkdirAll(filepath.Join(root, "var/lib/app"), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, link := range []struct{ target, name string }{{"/etc", "var/etc"}, {"lib/app", "var/app"}, {"../../..", "var/lib/up"}} {
		if err = os.Symlink(link.target, filepath.Join(root, link.name)); err != nil {
			t.Fatal(err)
		}
	}

	for p, want := range map[string]string{
		"/var/mnt/data":         filepath.Join(root, "var/mnt/data"),
		"/var/lib/app/new/file": filepath.Join(root, "var/lib/app/new/file"), // need not exist
		"/var/app/x":            filepath.Join(root, "var/lib/app/x"),        // a symlink inside the node's filesystem
		"/":                     root,
	} {
		if got, err := n.HostPath(p); err != nil || got != want {
			t.Errorf("HostPath(%s) = %q, %v; want %s", p, got, err, want)
		}
	}

	for p, want := range map[string]string{
		"var/lib":                 "is not absolute",
		"/var/mnt/../../etc":      `".." is not allowed`,
		"/var/etc/passwd":         "a symlink leads out of the node's filesystem",
		"/var/lib/up/escaped/dir": "a symlink leads out of the node's filesystem",
	} {
		if got, err := n.HostPath(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HostPath(%s) = %q, %v; want an error with %q", p, got, err, want)
		}
	}
}
