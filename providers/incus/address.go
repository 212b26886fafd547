package incus

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// What the next steps need from a new instance: its status and the
// addresses of one NIC. The daemon reports a guest's addresses when it can
// see into it (a container; a VM with the Incus agent); for a VM without
// the agent, the managed network's DHCP lease of the NIC's MAC says it.

// defaultWaitTimeout is how long wait_for waits when wait_timeout is unset.
const defaultWaitTimeout = 2 * time.Minute

// waitPoll is how often wait_for reads the instance again.
const waitPoll = 500 * time.Millisecond

// Addresses is what is seen of one instance's NIC.
type Addresses struct {
	Status, IPv4, IPv6, MAC string
	// NIC is the device (or, without one, the guest interface) reported.
	NIC string
	// Network is the managed network whose leases may tell the address.
	Network string
	// Seen says, for a message, what the daemon reported.
	Seen string
}

// PickNIC chooses the NIC whose addresses the outputs report and reads
// them from the instance's state: the device named nic (or, failing that,
// the guest interface of that name), else the first NIC device in name
// order (eth0 before eth1), else the first guest interface in name order
// that is not the loopback. The guest interface of a device is the one
// with its MAC (a VM's agent names it enp5s0, not eth0). Addresses are
// the first of scope global of each family. An error: nic names nothing.
func PickNIC(inst *incusapi.Instance, st *incusapi.InstanceState, nic string) (Addresses, error) {
	a := Addresses{Status: inst.Status}
	var ifaces map[string]incusapi.InstanceStateNetwork
	if st != nil {
		a.Status = st.Status
		ifaces = st.Network
	}
	devices := inst.ExpandedDevices
	if devices == nil {
		devices = inst.Devices
	}
	name, guest, err := chooseNIC(devices, ifaces, nic)
	if err != nil {
		return a, err
	}
	a.NIC = name
	if a.NIC == "" {
		a.Seen = fmt.Sprintf("status %s, no NIC", a.Status)
		return a, nil
	}
	if dev, ok := devices[a.NIC]; ok && guest == "" {
		guest = a.ofDevice(inst, dev, ifaces)
	}
	var seen []string
	if iface, ok := ifaces[guest]; ok {
		seen = a.fromInterface(iface)
	}
	in := "NIC " + a.NIC
	if guest != "" && guest != a.NIC {
		in += " (interface " + guest + ")"
	}
	if a.MAC != "" {
		in += ", MAC " + a.MAC
	}
	switch {
	case guest == "":
		a.Seen = fmt.Sprintf("status %s, %s: the daemon reports no interface for it (no agent in the VM?)", a.Status, in)
	case len(seen) == 0:
		a.Seen = fmt.Sprintf("status %s, %s: no address", a.Status, in)
	default:
		a.Seen = fmt.Sprintf("status %s, %s: %s", a.Status, in, strings.Join(seen, ", "))
	}
	return a, nil
}

// chooseNIC names the NIC that PickNIC reports, and its guest interface
// when the NIC is one ("" when it is a device, found by ofDevice).
func chooseNIC(devices map[string]map[string]string, ifaces map[string]incusapi.InstanceStateNetwork, nic string) (name, guest string, _ error) {
	var nics []string
	for name, dev := range devices {
		if dev["type"] == "nic" {
			nics = append(nics, name)
		}
	}
	slices.Sort(nics)
	switch {
	case nic != "" && devices[nic]["type"] == "nic":
		return nic, "", nil
	case nic != "":
		if _, ok := ifaces[nic]; !ok {
			return "", "", fmt.Errorf("the instance has no NIC %q (NIC devices: %s; guest interfaces: %s)", nic, listOr(nics), listOr(slices.Sorted(maps.Keys(ifaces))))
		}
		return nic, nic, nil
	case len(nics) > 0:
		return nics[0], "", nil
	}
	for _, name := range slices.Sorted(maps.Keys(ifaces)) {
		if name != "lo" && ifaces[name].Type != "loopback" {
			return name, name, nil
		}
	}
	return "", "", nil
}

// ofDevice fills the MAC and managed network of the NIC device dev and
// returns its guest interface: the one with its MAC, else the one of its
// name; "" when the daemon reports neither.
func (a *Addresses) ofDevice(inst *incusapi.Instance, dev map[string]string, ifaces map[string]incusapi.InstanceStateNetwork) string {
	config := inst.ExpandedConfig
	if config == nil {
		config = inst.Config
	}
	a.MAC = strings.ToLower(firstNonEmpty(dev["hwaddr"], config["volatile."+a.NIC+".hwaddr"]))
	a.Network = dev["network"]
	if a.Network == "" && dev["nictype"] == "bridged" {
		a.Network = dev["parent"]
	}
	for _, name := range slices.Sorted(maps.Keys(ifaces)) {
		if a.MAC != "" && strings.EqualFold(ifaces[name].Hwaddr, a.MAC) {
			return name
		}
	}
	if _, ok := ifaces[firstNonEmpty(dev["name"], a.NIC)]; ok {
		return firstNonEmpty(dev["name"], a.NIC)
	}
	return ""
}

// fromInterface fills the MAC when unknown and the first global address
// of each family from a guest interface; it returns every address seen.
func (a *Addresses) fromInterface(iface incusapi.InstanceStateNetwork) []string {
	var seen []string
	if a.MAC == "" {
		a.MAC = strings.ToLower(iface.Hwaddr)
	}
	for _, addr := range iface.Addresses {
		seen = append(seen, addr.Address+"/"+addr.Netmask+" ("+addr.Scope+")")
		if addr.Scope != "global" {
			continue
		}
		switch {
		case addr.Family == "inet" && a.IPv4 == "":
			a.IPv4 = addr.Address
		case addr.Family == "inet6" && a.IPv6 == "":
			a.IPv6 = addr.Address
		}
	}
	return seen
}

// FromLeases fills the addresses still missing from the leases of a's
// managed network that carry a's MAC.
func FromLeases(a *Addresses, leases []incusapi.NetworkLease) {
	found := false
	for _, l := range leases {
		if l.Type == "gateway" || a.MAC == "" || !strings.EqualFold(l.Hwaddr, a.MAC) {
			continue
		}
		found = true
		switch {
		case strings.Contains(l.Address, ":"):
			if a.IPv6 == "" {
				a.IPv6 = l.Address
			}
		case a.IPv4 == "":
			a.IPv4 = l.Address
		}
	}
	if found {
		a.Seen += fmt.Sprintf("; network %s has a lease for it", a.Network)
	} else {
		a.Seen += fmt.Sprintf("; no lease for it on network %s", a.Network)
	}
}

// addresses reads the instance's state, and the leases of its NIC's
// managed network when the state lacks an address.
func addresses(ctx context.Context, c *call, name string, inst *incusapi.Instance, nic string) (Addresses, phases.Diagnostics) {
	var st *incusapi.InstanceState
	if inst.Status != "Stopped" {
		var err error
		if st, err = c.Settings.c.InstanceState(ctx, name); err != nil {
			return Addresses{}, apiErr(c, "Cannot Read Instance State", err)
		}
	}
	a, err := PickNIC(inst, st, nic)
	if err != nil {
		return a, errorf("Unknown NIC", "%s: instance %q: %v. Set nic to one of them.", c.Addr, name, err)
	}
	if (a.IPv4 == "" || a.IPv6 == "") && a.Network != "" && a.MAC != "" && a.Status == "Running" {
		leases, err := c.Settings.c.NetworkLeases(ctx, a.Network)
		if err != nil {
			if ctx.Err() != nil {
				return a, apiErr(c, "Cannot Read Network Leases", err)
			}
			// An unmanaged bridge has no leases: no fallback, not a failure.
			a.Seen += fmt.Sprintf("; the leases of network %s cannot be read (%v)", a.Network, err)
			return a, nil
		}
		FromLeases(&a, leases)
	}
	return a, nil
}

// has says whether a has the address wait_for names.
func (a Addresses) has(waitFor string) bool {
	switch waitFor {
	case "ipv4":
		return a.IPv4 != ""
	case "ipv6":
		return a.IPv6 != ""
	}
	return true
}

// outputs are the step's outputs with the addresses seen.
func (a Addresses) outputs(name, typ string) instanceOut {
	return instanceOut{Name: name, Type: typ, Status: a.Status, IPv4: a.IPv4, IPv6: a.IPv6, MAC: a.MAC}
}

// waitAddress reads the instance until it has the address s.WaitFor
// names (at once when it names none), up to s.WaitTimeout.
func waitAddress(ctx context.Context, c *call, s DesiredInstance) (_ Addresses, _ phases.Diagnostics, stopped bool) {
	timeout := defaultWaitTimeout
	if s.WaitTimeout != "" {
		timeout, _ = time.ParseDuration(s.WaitTimeout) // checked by normalize
	}
	start := time.Now()
	family := map[string]string{"ipv4": "IPv4", "ipv6": "IPv6"}[s.WaitFor]
	logged := false
	for {
		inst, _, err := getInstance(ctx, c, s.Name)
		if err != nil {
			return Addresses{}, apiErr(c, "Cannot Read Instance", err), false
		}
		if inst == nil {
			return Addresses{}, unknownInstance(c, s.Name, ""), false
		}
		a, d := addresses(ctx, c, s.Name, inst, s.NIC)
		if d.HasErrors() {
			return a, d, false
		}
		if a.has(s.WaitFor) {
			if s.WaitFor != "" {
				logf(c, "instance %s has %s address %s after %s", s.Name, family, map[string]string{"ipv4": a.IPv4, "ipv6": a.IPv6}[s.WaitFor], time.Since(start).Round(time.Millisecond))
			}
			return a, nil, false
		}
		if a.Status == "Stopped" {
			return a, errorf("Instance Not Running", "%s waits for an %s address of instance %q, but it is stopped, so it gets none (last seen: %s). Set start = true, or drop wait_for.", c.Addr, family, s.Name, a.Seen), false
		}
		if time.Since(start) >= timeout {
			return a, errorf("No "+family+" Address", "%s: instance %q reported no %s address within %s (wait_timeout). Last seen: %s. Check that the NIC is on a network with DHCP (or a static address), that the guest asks for a lease, and, for a VM, that the Incus agent runs or the network is managed by Incus.", c.Addr, s.Name, family, timeout, a.Seen), false
		}
		if !logged {
			logf(c, "instance %s: waiting up to %s for an %s address (%s)", s.Name, timeout, family, a.Seen)
			logged = true
		}
		select {
		case <-c.Stop:
			// The instance is made and started: only the wait is cut.
			logf(c, "instance %s: stopped waiting for an %s address after %s (%s)", s.Name, family, time.Since(start).Round(time.Millisecond), a.Seen)
			return a, sdk.StoppedWaiting(c.Addr, fmt.Sprintf("instance %q has the step's settings and is %s", s.Name, strings.ToLower(a.Status)),
				fmt.Sprintf("its %s address (wait_for; last seen: %s)", family, a.Seen)), true
		case <-ctx.Done():
			return a, apiErr(c, "Cannot Read Instance", ctx.Err()), false
		case <-time.After(waitPoll):
		}
	}
}

func listOr(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
