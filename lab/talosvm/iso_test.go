package talosvm_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/lab/talosvm"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// isoAddr is a free address of this package's ISO tests, in block 26.
func isoAddr(t *testing.T, host int) string {
	t.Helper()

	addr := fmt.Sprintf("127.26.9.%d", host)
	for _, port := range []int{talosvm.APIPort, 6443} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
		if err != nil {
			t.Fatalf("%s:%d is taken: %v", addr, port, err)
		}

		l.Close() //nolint:errcheck
	}

	return addr
}

// writeISO writes the lab factory's ISO of that version and extensions.
func writeISO(t *testing.T, version string, ext ...string) string {
	t.Helper()

	var s factory.Schematic
	s.Customization.SystemExtensions.OfficialExtensions = ext

	b, err := factory.EncodeISO(version, "amd64", s)
	if err != nil {
		t.Fatal(err)
	}

	p := filepath.Join(t.TempDir(), "talos.iso")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}

	return p
}

func bootISO(t *testing.T, iso string, host int) (*talosvm.VM, error) {
	t.Helper()

	vm, err := talosvm.Boot(context.Background(), talosvm.Spec{Name: "talos", Addr: isoAddr(t, host), Dir: t.TempDir(), Disks: disks, GPU: true, ISO: iso,
		Log: func(format string, args ...any) { t.Logf(format, args...) }})
	if err == nil {
		t.Cleanup(vm.Stop)
	}

	return vm, err
}

// bootedImage is what the node in maintenance mode says it booted, read
// as talosctl get version / get extensions --insecure do.
func bootedImage(t *testing.T, vm *talosvm.VM) (version string, extensions []string) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.WithEndpoints(vm.Addr()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	v, err := safe.StateGet[*runtime.Version](ctx, c.COSI, runtime.NewVersion().Metadata())
	if err != nil {
		t.Fatalf("get version --insecure: %v", err)
	}

	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("get extensions --insecure: %v", err)
	}

	for e := range list.All() {
		extensions = append(extensions, e.TypedSpec().Metadata.Name+"="+e.TypedSpec().Metadata.Version)
	}

	return v.TypedSpec().Version, extensions
}

func modules(t *testing.T, vm *talosvm.VM) string {
	t.Helper()

	b, err := os.ReadFile(filepath.Join(vm.Node().Root(), "proc/modules"))
	if err != nil {
		t.Fatal(err)
	}

	return string(b)
}

// A VM runs the ISO it booted: its version, and its schematic's
// extensions; the gpu device alone loads no driver.
func TestVMRunsTheISOItBooted(t *testing.T) {
	t.Parallel()

	withI915, err := bootISO(t, writeISO(t, "v1.13.3", "siderolabs/i915"), 10)
	if err != nil {
		t.Fatal(err)
	}

	id := talos.ExtensionsSchematicID("siderolabs/i915")
	if v, ext := bootedImage(t, withI915); v != "v1.13.3" || !slices.Equal(ext, []string{"i915=v1.13.3", "schematic=" + id}) {
		t.Errorf("booted from the i915 ISO: version %s, extensions %v", v, ext)
	}

	if mods := modules(t, withI915); !strings.Contains(mods, "i915 ") {
		t.Errorf("/proc/modules of the i915 ISO with the gpu: %q", mods)
	}

	// the driver made the render node that VA-API opens
	if fi, err := os.Stat(filepath.Join(withI915.Node().Root(), "dev/dri/renderD128")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("/dev/dri/renderD128 of the i915 ISO with the gpu: %v %v", fi, err)
	}

	if b, err := os.ReadFile(filepath.Join(withI915.Node().Root(), "sys/class/drm/renderD128/dev")); err != nil || string(b) != "226:128\n" {
		t.Errorf("/sys/class/drm/renderD128/dev of the i915 ISO with the gpu: %q %v", b, err)
	}

	without, err := bootISO(t, writeISO(t, "v1.13.3", "siderolabs/iscsi-tools"), 11)
	if err != nil {
		t.Fatal(err)
	}

	if _, ext := bootedImage(t, without); !slices.Contains(ext, "iscsi-tools=v1.13.3") || slices.Contains(ext, "i915=v1.13.3") {
		t.Errorf("booted from the ISO without i915: extensions %v", ext)
	}

	if mods := modules(t, without); strings.Contains(mods, "i915") || !strings.Contains(mods, "virtio_net") {
		t.Errorf("/proc/modules of an ISO without i915, with the gpu: %q", mods)
	}

	if _, err := os.Stat(filepath.Join(without.Node().Root(), "dev/dri")); !os.IsNotExist(err) {
		t.Errorf("/dev/dri of an ISO without i915, with the gpu: %v", err)
	}

	newer, err := bootISO(t, writeISO(t, "v1.14.1", "siderolabs/i915"), 12)
	if err != nil {
		t.Fatal(err)
	}

	if v, _ := bootedImage(t, newer); v != "v1.14.1" || newer.Node().Version() != "v1.14.1" {
		t.Errorf("booted from a v1.14.1 ISO: the node says %s, runs %s", v, newer.Node().Version())
	}
}

// A file that is no Talos image does not boot.
func TestEmptyISODoesNotBoot(t *testing.T) {
	t.Parallel()

	empty := filepath.Join(t.TempDir(), "talos.iso")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := bootISO(t, empty, 13)

	var nb *talosvm.NoBootableMediumError
	if !errors.As(err, &nb) || !errors.Is(err, factory.ErrNoBootableMedium) || !strings.Contains(err.Error(), "No bootable option or device was found") {
		t.Fatalf("an empty ISO: %v", err)
	}

	if c, err := net.DialTimeout("tcp", "127.26.9.13:50000", time.Second); err == nil {
		c.Close()
		t.Error("something answers at the address of the VM that did not boot")
	}
}
