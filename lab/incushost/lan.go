package incushost

import (
	"maps"
	"slices"
	"strings"
)

// The LAN: a bridge of the host's own (IncusOS makes one of each
// interface, named after it), which Incus lists as an unmanaged network.
// A NIC bridged onto it is on the home's LAN: its address comes from the
// LAN's DHCP server (the home router, Options.LANLease), which Incus does
// not run and does not see. So, as on a real host, the instance's state
// shows no address on that NIC (a Talos VM runs no Incus agent), and its
// network has no leases to read.

//
// IncusOS after its direct-attach tutorial (Options.LANPhysical): the
// interface has the instances role, so the bridge is there, and a
// managed network of type physical whose parent is that bridge is what
// the host lists beside it. A NIC naming that network is bridged onto
// the LAN as well (Incus treats a physical network over a bridge as a
// bridged NIC: internal/server/device/nic_physical.go), and, as Incus,
// the lab refuses nictype or parent beside network.

// onLAN reports whether a NIC device is on the LAN: bridged onto its
// bridge, or naming its managed physical network.
func (s *Server) onLAN(d map[string]string) bool {
	if s.opts.LAN == "" || d["type"] != "nic" {
		return false
	}
	if d["network"] != "" {
		return s.opts.LANPhysical != "" && d["network"] == s.opts.LANPhysical
	}
	return d["parent"] == s.opts.LAN
}

// lanPhysicalNetwork is IncusOS's managed physical network over the LAN
// bridge, as GET /1.0/networks shows it.
func (s *Server) lanPhysicalNetwork() map[string]any {
	return map[string]any{"name": s.opts.LANPhysical, "type": "physical", "managed": true, "status": "Created",
		"config": map[string]string{"parent": s.opts.LAN}, "description": "", "locations": []string{"none"}, "project": "default"}
}

// nicMAC is a NIC's MAC address: its hwaddr, else the one the host gave
// it at creation (volatile.DEV.hwaddr).
func nicMAC(cfg map[string]string, dev string, d map[string]string) string {
	if d["hwaddr"] != "" {
		return strings.ToLower(d["hwaddr"])
	}
	return cfg["volatile."+dev+".hwaddr"]
}

// lanAddress is the address the LAN's DHCP server gives the first of the
// instance's NICs on the LAN ("" without such a NIC, or without a lease
// for its MAC); the caller holds s.mu.
func (s *Server) lanAddress(in *instance) (mac, addr string, onLAN bool) {
	cfg, devs := s.expanded(in)
	for _, dev := range slices.Sorted(maps.Keys(devs)) {
		d := devs[dev]
		if !s.onLAN(d) {
			continue
		}
		mac = nicMAC(cfg, dev, d)
		if s.opts.LANLease != nil {
			addr = s.opts.LANLease(mac)
		}
		return mac, addr, true
	}
	return "", "", false
}

// lanNetwork is the LAN bridge as GET /1.0/networks shows a host's own
// bridge: unmanaged, no config, no leases.
func (s *Server) lanNetwork() map[string]any {
	return map[string]any{"name": s.opts.LAN, "type": "bridge", "managed": false, "status": "", "config": map[string]string{},
		"description": "", "locations": nil, "project": "default"}
}
