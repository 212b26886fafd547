package talosnode_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"google.golang.org/grpc/codes"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

var labDisks = []talosnode.Disk{
	{Name: "/dev/sda", Size: "32GiB", Model: "QEMU HARDDISK", Transport: "scsi"},
	{Name: "/dev/sdb", Size: "150GiB", Model: "QEMU HARDDISK", Serial: "bulk", Transport: "scsi"},
}

// firstConfig is what a user brings to a node in maintenance mode: a config
// and a talosconfig generated from their own secrets bundle.
func firstConfig(t *testing.T, installDisk string) ([]byte, *generate.Input) {
	t.Helper()

	in, err := talosnode.UserInput("first",
		generate.WithInstallDisk(installDisk),
		generate.WithInstallImage("factory.talos.dev/metal-installer/abc123:v1.13.3"),
	)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	b, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return b, in
}

// insecure connects like talosctl --insecure: TLS without verifying the
// server and without a client certificate.
func insecure(t *testing.T, n *talosnode.Node) (*client.Client, context.Context) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	c, err := client.New(ctx, client.WithEndpoints(n.Addr()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c, ctx
}

func diskSizes(t *testing.T, ctx context.Context, c *client.Client) map[string]uint64 {
	t.Helper()

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		t.Fatal(err)
	}

	got := map[string]uint64{}
	for d := range disks.All() {
		got[d.TypedSpec().DevPath] = d.TypedSpec().Size
	}

	return got
}

func TestMaintenanceInstall(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, talosnode.Options{Dir: dir, Maintenance: true, Disks: labDisks, RebootDuration: 200 * time.Millisecond})

	if !n.Maintenance() {
		t.Fatal("node without config started with --maintenance is not in maintenance mode")
	}

	c, ctx := insecure(t, n)

	// Version needs os:admin, which a maintenance client never has.
	_, err := c.Version(ctx)
	wantCode(t, err, codes.Unimplemented, "API is not implemented in maintenance mode")

	// the disks, through the resource API as talosctl get disks --insecure reads them
	rd, err := c.ResolveResourceKind(ctx, new(resource.Namespace), "disks")
	if err != nil || rd.TypedSpec().Type != block.DiskType {
		t.Fatalf("resolving disks: %v %v", rd, err)
	}

	sizes := diskSizes(t, ctx, c)
	if len(sizes) != 2 || sizes["/dev/sda"] != 32<<30 || sizes["/dev/sdb"] != 150<<30 {
		t.Fatalf("disks: %v", sizes)
	}

	sdb, err := safe.StateGetByID[*block.Disk](ctx, c.COSI, "sdb")
	if err != nil || sdb.TypedSpec().Model != "QEMU HARDDISK" || sdb.TypedSpec().Serial != "bulk" || sdb.TypedSpec().Transport != "scsi" {
		t.Fatalf("sdb: %v %v", sdb, err)
	}

	if _, err = safe.StateGetByID[*block.SystemDisk](ctx, c.COSI, block.SystemDiskID); !state.IsNotFoundError(err) {
		t.Fatalf("system disk before the install: %v", err)
	}

	// clients only read resources
	if err = c.COSI.Create(ctx, block.NewDisk(block.NamespaceName, "sdz")); err == nil || !strings.Contains(err.Error(), "code = PermissionDenied desc = not authorized") {
		t.Fatalf("create a disk: %v", err)
	}

	// admin-only APIs are refused
	_, err = c.MachineClient.Reboot(ctx, &machine.RebootRequest{})
	wantCode(t, err, codes.PermissionDenied, "not authorized")

	data, in := firstConfig(t, "/dev/sda")

	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	wantCode(t, err, codes.Unimplemented, "apply configuration --mode='no-reboot' is not supported in maintenance mode")

	noDisk := bytes.Replace(data, []byte("disk: /dev/sda"), []byte("disk: \"\""), 1)
	_, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: noDisk, Mode: machine.ApplyConfigurationRequest_REBOOT})
	wantCode(t, err, codes.InvalidArgument, "configuration validation failed")

	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	if err != nil || resp.GetMessages()[0].GetModeDetails() != "Dry run summary:\nNode is running in maintenance mode and does not have a config yet." {
		t.Fatalf("dry run: %v %v", resp, err)
	}

	if _, err = c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-n.Installed():
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not come back installed")
	}

	if n.Maintenance() {
		t.Fatal("still in maintenance mode after the install")
	}

	if image, disk := n.Install(); image != "factory.talos.dev/metal-installer/abc123:v1.13.3" || disk != "/dev/sda" {
		t.Fatalf("install: %q %q", image, disk)
	}

	if !bytes.Equal(n.PersistedConfig(), data) {
		t.Fatal("the applied config is not the persisted one")
	}

	// the installed node speaks mTLS with the PKI of the applied config:
	// the talosconfig of the same bundle works
	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}

	tc.Contexts[tc.Context].Endpoints = []string{n.Addr()}

	mc, err := client.New(ctx, client.WithConfig(tc))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close() //nolint:errcheck

	nctx := client.WithNode(ctx, "127.0.0.1")

	v, err := mc.Version(nctx)
	if err != nil || v.GetMessages()[0].GetVersion().GetTag() != "v1.13.3" {
		t.Fatalf("version over mTLS: %v %v", v, err)
	}

	sd, err := safe.StateGetByID[*block.SystemDisk](nctx, mc.COSI, block.SystemDiskID)
	if err != nil || sd.TypedSpec().DevPath != "/dev/sda" || sd.TypedSpec().DiskID != "sda" {
		t.Fatalf("system disk after the install: %v %v", sd, err)
	}

	if got := diskSizes(t, nctx, mc); len(got) != 2 {
		t.Fatalf("disks after the install: %v", got)
	}

	// the maintenance API is gone: an insecure client gets no TLS session
	ic, ictx := insecure(t, n)
	if _, err = ic.Version(ictx); err == nil {
		t.Fatal("insecure client still served after the install")
	}

	// a restart (even with --maintenance) boots the installed node
	n.Stop()

	n2 := startNode(t, talosnode.Options{Dir: dir, Maintenance: true, Disks: labDisks})
	if n2.Maintenance() || n2.Version() != "v1.13.3" {
		t.Fatalf("restart: maintenance %v version %s", n2.Maintenance(), n2.Version())
	}

	c2, ctx2 := connect(t, n2)
	if _, err = c2.Version(ctx2); err != nil {
		t.Fatal(err)
	}

	// its own talosconfig names the context after the installed config's cluster
	if b, err := os.ReadFile(n2.TalosconfigPath()); err != nil || !strings.Contains(string(b), "context: first") {
		t.Fatalf("talosconfig after restart: %v\n%s", err, b)
	}

	disks, err := safe.StateListAll[*block.Disk](ctx2, c2.COSI)
	if err != nil || disks.Len() != 2 || disks.Get(0).Metadata().Owner() != "block.DisksController" {
		t.Fatalf("disks after restart: %v", err)
	}
}

// An install to a disk the machine does not have fails after the reply (as
// the installer does); the node comes back in maintenance mode.
func TestMaintenanceInstallFails(t *testing.T) {
	n := startNode(t, talosnode.Options{Maintenance: true, Disks: labDisks, RebootDuration: 100 * time.Millisecond})
	c, ctx := insecure(t, n)

	data, _ := firstConfig(t, "/dev/nvme0n1")
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 10*time.Second, "the install fails", func() bool { return len(n.InstallFailures()) == 1 })

	if got := n.InstallFailures()[0]; got != "failed to install: install disk /dev/nvme0n1 not found" {
		t.Fatalf("install failure: %q", got)
	}

	// back in maintenance mode: the disks are served again, nothing persisted
	eventually(t, 10*time.Second, "maintenance mode again", func() bool {
		_, err := safe.StateListAll[*block.Disk](ctx, c.COSI)

		return err == nil
	})

	if !n.Maintenance() || len(n.PersistedConfig()) != 0 {
		t.Fatalf("maintenance %v, persisted %d bytes", n.Maintenance(), len(n.PersistedConfig()))
	}

	if image, disk := n.Install(); image != "" || disk != "" {
		t.Fatalf("install recorded: %q %q", image, disk)
	}

	// and a good config installs
	data, _ = firstConfig(t, "/dev/sdb")
	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-n.Installed():
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not come back installed")
	}

	if _, disk := n.Install(); disk != "/dev/sdb" {
		t.Fatalf("install disk %q", disk)
	}
}

func TestParseDisk(t *testing.T) {
	d, err := talosnode.ParseDisk("name=/dev/sdb,size=150GiB,model=QEMU HARDDISK,readonly=true")
	if err != nil || d.Name != "/dev/sdb" || d.Size != "150GiB" || d.Model != "QEMU HARDDISK" || !d.Readonly || d.ID() != "sdb" {
		t.Fatalf("%+v %v", d, err)
	}

	for _, bad := range []string{"name=sdb,size=1GiB", "name=/dev/sdb", "name=/dev/sdb,size=lots", "name=/dev/sdb,size=1GiB,colour=red", "name"} {
		if _, err := talosnode.ParseDisk(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
