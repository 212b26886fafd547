package talosvm_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/lab/talosvm"
)

// TestVMNICsAreTheNodesLinks: the VM's NIC, with its MAC, is what the
// node in maintenance mode lists as its link (talosctl get links
// --insecure).
func TestVMNICsAreTheNodesLinks(t *testing.T) {
	t.Parallel()

	vm := boot(t, talosvm.Spec{Name: "talos", NICs: []talosnode.NIC{{Name: "enp5s0", MAC: "10:66:6A:12:34:56"}}})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(ctx, client.WithEndpoints(vm.Node().Addr()), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	l, err := safe.StateGetByID[*network.LinkStatus](ctx, c.COSI, "enp5s0")
	if err != nil || l.TypedSpec().HardwareAddr.String() != "10:66:6a:12:34:56" {
		t.Fatalf("link enp5s0 of the VM's node: %v %v", l, err)
	}
}
