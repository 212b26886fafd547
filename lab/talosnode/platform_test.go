package talosnode_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// A nocloud image with a config drive installs from its user-data, never
// serving the maintenance API; without a drive, with a #cloud-config or
// with a config that does not validate, it waits in maintenance mode.
func TestNocloudInstallsFromTheConfigDrive(t *testing.T) {
	t.Parallel()

	data, in := firstConfig(t, "/dev/sda")
	boot := func(userData []byte) *talosnode.Node {
		n, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: labDisks,
			Platform: "nocloud", UserData: userData, RebootDuration: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err = n.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}

	n := boot(data)
	select {
	case <-n.Installed():
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not install from its config drive")
	}
	if n.Maintenance() || len(n.Applies()) != 0 || !bytes.Equal(n.PersistedConfig(), data) || n.PlatformConfig() == "" {
		t.Fatalf("maintenance %v, applies %v, platform config %q", n.Maintenance(), n.Applies(), n.PlatformConfig())
	}
	tc, err := in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.Contexts[tc.Context].Endpoints = []string{n.Addr()}
	c, ctx := insecure(t, n)
	if _, err = c.Version(ctx); err == nil {
		t.Error("the installed node answered a client without a certificate")
	}
	mc, err := client.New(ctx, client.WithConfig(tc))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close() //nolint:errcheck
	if v, err := mc.Version(client.WithNode(ctx, "127.0.0.1")); err != nil || v.GetMessages()[0].GetVersion().GetTag() != "v1.13.3" {
		t.Fatalf("version over mTLS: %v %v", v, err)
	}

	noDisk := bytes.Replace(data, []byte("disk: /dev/sda"), []byte("disk: \"\""), 1)
	for name, ud := range map[string][]byte{"no drive": nil, "cloud-config": []byte("#cloud-config\n{}"), "invalid": noDisk} {
		n := boot(ud)
		if !n.Maintenance() || n.PlatformConfig() != "" {
			t.Errorf("%s: maintenance %v, platform config %q", name, n.Maintenance(), n.PlatformConfig())
		}
		if name == "invalid" && (len(n.InstallFailures()) != 1 || !strings.Contains(n.InstallFailures()[0], "configuration validation failed")) {
			t.Errorf("invalid: failures %v", n.InstallFailures())
		}
	}
}
