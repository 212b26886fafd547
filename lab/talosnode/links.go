package talosnode

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// NIC is a network interface of the simulated machine: what a node
// reports as a network.LinkStatus (talosctl get links), so that a client
// can tell which machine answers at an address by its MAC.
type NIC struct {
	Name string // the link's name on the node (its resource ID), e.g. eth0
	MAC  string // its hardware address, in any form net.ParseMAC reads
}

// defaultNICs is one eth0 with a MAC of its own, stable for the node's
// directory (a VM's volatile.eth0.hwaddr is stable for the instance).
func defaultNICs(dir string) []NIC {
	h := sha256.Sum256([]byte(dir))

	return []NIC{{Name: "eth0", MAC: fmt.Sprintf("10:66:6a:%02x:%02x:%02x", h[0], h[1], h[2])}}
}

func (c NIC) check() error {
	if c.Name == "" || c.Name == "lo" {
		return fmt.Errorf("NIC %q: a name other than lo is required", c.Name)
	}

	if _, err := net.ParseMAC(c.MAC); err != nil {
		return fmt.Errorf("NIC %s: MAC %q: %w", c.Name, c.MAC, err)
	}

	return nil
}

// addLinks creates the LinkStatus resources of a node (namespace network)
// as a Talos node's network controllers report them: lo, then each NIC
// (an ethernet link up, kind "" as a physical link has), and the resource
// definition talosctl resolves "links" with.
func addLinks(st state.State, nics []NIC) error {
	ctx := context.Background()

	rd, err := meta.NewResourceDefinition(network.LinkStatusExtension{}.ResourceDefinition())
	if err != nil {
		return err
	}

	if err = st.Create(ctx, rd); err != nil {
		return err
	}

	lo := network.NewLinkStatus(network.NamespaceName, "lo")
	spec := lo.TypedSpec()
	spec.Index, spec.Type, spec.MTU, spec.QueueDisc = 1, nethelpers.LinkLoopbck, 65536, "noqueue"
	spec.Flags = nethelpers.LinkFlags(nethelpers.LinkUp | nethelpers.LinkLoopback | nethelpers.LinkRunning | nethelpers.LinkLowerUp)
	spec.HardwareAddr = make(nethelpers.HardwareAddr, 6)
	spec.BroadcastAddr = make(nethelpers.HardwareAddr, 6)
	spec.OperationalState, spec.LinkState = nethelpers.OperStateUnknown, true // Linux reports lo's operstate as unknown

	if err = st.Create(ctx, lo, state.WithCreateOwner("network.LinkStatusController")); err != nil {
		return err
	}

	for i, c := range nics {
		mac, _ := net.ParseMAC(c.MAC) //nolint:errcheck // checked by New

		r := network.NewLinkStatus(network.NamespaceName, c.Name)
		spec := r.TypedSpec()
		spec.Index, spec.Type, spec.MTU, spec.QueueDisc = uint32(i+2), nethelpers.LinkEther, 1500, "pfifo_fast"
		spec.Flags = nethelpers.LinkFlags(nethelpers.LinkUp | nethelpers.LinkBroadcast | nethelpers.LinkRunning | nethelpers.LinkMulticast | nethelpers.LinkLowerUp)
		spec.HardwareAddr = nethelpers.HardwareAddr(mac)
		spec.PermanentAddr = nethelpers.HardwareAddr(mac)
		spec.BroadcastAddr = nethelpers.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		spec.OperationalState, spec.LinkState = nethelpers.OperStateUp, true
		spec.Driver, spec.BusPath = "virtio_net", fmt.Sprintf("pci-0000:%02x:00.0", 5+i)

		if err = st.Create(ctx, r, state.WithCreateOwner("network.LinkStatusController")); err != nil {
			return fmt.Errorf("NIC %s: %w", c.Name, err)
		}
	}

	return nil
}
