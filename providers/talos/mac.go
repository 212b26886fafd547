package talos

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/homelab-migrate/migrate/phases"
)

// The MAC check of a first install. A VM on a bridge to the LAN gets its
// address from the router's DHCP reservation for its NIC's MAC; Incus
// does not know that address and a node in maintenance mode cannot prove
// who it is (self-signed TLS). So before the first config (with the
// cluster's secrets) goes to the address, the node answering there must
// have the VM's MAC: its links, read over the insecure connection as
// talosctl get links --insecure reads them (network.LinkStatus, namespace
// network, which a node in maintenance mode serves to any client).

// normalizeMAC reads a MAC in any usual form (10:66:6A:00:00:01,
// 10-66-6a-00-00-01, 1066.6a00.0001) as lower-case colon form; only
// 48-bit MACs, what an Incus NIC's hwaddr is.
func normalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("%q is not a MAC address such as \"10:66:6a:00:00:01\"", s)
	}
	return hw.String(), nil
}

// validateMAC is the check of the mac attribute at validate.
func validateMAC(c *call, a *mcAttrs) phases.Diagnostics {
	if a.MAC == nil || c.Unknown("mac") {
		return nil
	}
	if _, err := normalizeMAC(*a.MAC); err != nil {
		return phases.Errorf("Invalid Attribute Value", "The \"mac\" attribute of %s must be the MAC of the VM's NIC, such as \"10:66:6a:00:00:01\" (10-66-6A-00-00-01 and 1066.6a00.0001 are read too), not %q.", c.addr, *a.MAC)
	}
	return nil
}

// seenLink is a link of a node: its name and MAC.
type seenLink struct{ name, mac string }

func linkList(ls []seenLink) string {
	if len(ls) == 0 {
		return "no NIC"
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.mac + " (" + l.name + ")"
	}
	return strings.Join(out, ", ")
}

// nodeLinks lists the node's links with a hardware address (lo has none
// worth the name: all zeroes) through the resource API.
func nodeLinks(ctx context.Context, c *client.Client) ([]seenLink, error) {
	list, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		return nil, apiErr("COSI List network.LinkStatus", err)
	}
	var out []seenLink
	for l := range list.All() {
		mac := net.HardwareAddr(l.TypedSpec().HardwareAddr).String()
		if mac == "" || strings.Trim(mac, "0:") == "" {
			continue
		}
		out = append(out, seenLink{name: l.Metadata().ID(), mac: mac})
	}
	return out, nil
}

// hasMAC finds the link of the MAC.
func hasMAC(ls []seenLink, mac string) (seenLink, bool) {
	for _, l := range ls {
		if l.mac == mac {
			return l, true
		}
	}
	return seenLink{}, false
}

// checkMAC reads the links of the node in maintenance mode at addr on
// the insecure client ic and says whether one has the MAC; its error
// diagnostic names the address, the MACs found, the one expected and
// what to check. sent is what the error says of the config ("Nothing
// was sent." at apply).
func (c *call) checkMAC(ctx context.Context, ic *client.Client, addr, mac, sent string) (seenLink, phases.Diagnostics) {
	ls, err := nodeLinks(ctx, ic)
	if err != nil {
		return seenLink{}, phases.Errorf("Cannot Read Links", "Reading the links of node %s (maintenance mode), whose MAC must be %s (mac of %s) before the first config is sent, failed: %v.%s", addr, mac, c.addr, err, sent)
	}
	if l, ok := hasMAC(ls, mac); ok {
		return l, nil
	}
	return seenLink{}, phases.Errorf("Another Machine At The Address",
		"The node in maintenance mode at %s has %s, not %s (the mac of %s): another machine of the LAN answers at this address, and the first config (with the cluster's secrets) is not sent to it.%s "+
			"Check the router's DHCP reservation of %s for %s (that it hands this address to that MAC, and that no other machine holds a lease or a static address there), and that the VM has a NIC with hwaddr %s on the LAN bridge.",
		addr, linkList(ls), mac, c.addr, sent, mac, hostOf(addr), mac)
}

// macFor is the MAC the node must have; with several nodes the mac
// attribute names no one of them, and is refused.
func (c *call) macFor(ns []node, mac string) phases.Diagnostics {
	if mac == "" || len(ns) <= 1 {
		return nil
	}
	names := make([]string, len(ns))
	for i, n := range ns {
		names[i] = n.name
	}
	return phases.Errorf("One MAC For Several Nodes", "The mac attribute of %s is the MAC of one VM's NIC, but the step targets %d nodes (%s). Give each node its own talos_machine_config step, with a talos provider block whose endpoints name that node's address, and its VM's MAC.", c.addr, len(ns), strings.Join(names, ", "))
}

// insecureCheckMAC is checkMAC on a client of its own.
func (c *call) insecureCheckMAC(ctx context.Context, addr, mac, sent string) (seenLink, phases.Diagnostics) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	ic, err := insecureClient(ctx, addr)
	if err != nil {
		return seenLink{}, phases.FromError("Cannot Reach Talos", err)
	}
	defer ic.Close() //nolint:errcheck
	return c.checkMAC(ctx, ic, addr, mac, sent)
}
