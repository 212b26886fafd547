package talosnode_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// links lists the node's links through the resource API, as talosctl get
// links reads them: ID -> the link's status.
func links(t *testing.T, ctx context.Context, c *client.Client) map[string]network.LinkStatusSpec {
	t.Helper()

	list, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		t.Fatalf("COSI List of network.LinkStatus: %v", err)
	}

	out := map[string]network.LinkStatusSpec{}
	for l := range list.All() {
		if l.Metadata().Namespace() != network.NamespaceName {
			t.Errorf("link %s in namespace %q", l.Metadata().ID(), l.Metadata().Namespace())
		}

		out[l.Metadata().ID()] = *l.TypedSpec()
	}

	return out
}

func checkLinks(t *testing.T, where string, got map[string]network.LinkStatusSpec, wantMAC string) {
	t.Helper()

	eth, lo := got["eth0"], got["lo"]
	if len(got) != 2 || eth.HardwareAddr.String() != wantMAC || eth.Type != nethelpers.LinkEther || eth.Kind != "" ||
		eth.OperationalState != nethelpers.OperStateUp || !eth.LinkState {
		t.Errorf("%s: links %+v, want lo and eth0 %s, ether, up", where, got, wantMAC)
	}

	if lo.Type != nethelpers.LinkLoopbck || !lo.LinkState || lo.HardwareAddr.String() != "00:00:00:00:00:00" {
		t.Errorf("%s: lo = %+v", where, lo)
	}
}

// TestLinksInMaintenanceAndInstalled: the insecure client of a node in
// maintenance mode lists its links, as talosctl get links --insecure
// does, with the NIC's MAC normalized; so does the mTLS client of an
// installed node, and a single Get of eth0 too.
func TestLinksInMaintenanceAndInstalled(t *testing.T) {
	t.Parallel()

	m := startNode(t, talosnode.Options{Dir: t.TempDir(), Maintenance: true, Disks: labDisks, NICs: []talosnode.NIC{{Name: "eth0", MAC: "10-66-6A-00-00-01"}}})
	c, ctx := insecure(t, m)
	checkLinks(t, "maintenance mode", links(t, ctx, c), "10:66:6a:00:00:01")

	eth, err := safe.StateGetByID[*network.LinkStatus](ctx, c.COSI, "eth0")
	if err != nil || eth.TypedSpec().HardwareAddr.String() != "10:66:6a:00:00:01" {
		t.Errorf("Get of link eth0: %v %v", eth, err)
	}

	n := startNode(t, talosnode.Options{Dir: t.TempDir(), NICs: []talosnode.NIC{{Name: "eth0", MAC: "10:66:6a:00:00:02"}}})
	mc, mctx := connect(t, n)
	checkLinks(t, "installed", links(t, client.WithNode(mctx, "127.0.0.1"), mc), "10:66:6a:00:00:02")
}

// TestDefaultNICAndBadMAC: without NICs the node has an eth0 of its own
// MAC; a MAC that does not parse is refused by New.
func TestDefaultNICAndBadMAC(t *testing.T) {
	t.Parallel()

	n := startNode(t, talosnode.Options{Dir: t.TempDir(), Maintenance: true})
	c, ctx := insecure(t, n)

	if mac := links(t, ctx, c)["eth0"].HardwareAddr.String(); !strings.HasPrefix(mac, "10:66:6a:") {
		t.Errorf("default eth0 MAC %q", mac)
	}

	if _, err := talosnode.New(talosnode.Options{Dir: t.TempDir(), NICs: []talosnode.NIC{{Name: "eth0", MAC: "10:66:6a:00:00"}}}); err == nil || !strings.Contains(err.Error(), `MAC "10:66:6a:00:00"`) {
		t.Errorf("New with a bad MAC: %v", err)
	}
}
