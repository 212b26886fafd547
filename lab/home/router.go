package home

import (
	"fmt"
	"net"
	"strings"
	"sync"
)

// The home router: the LAN's DHCP server. It hands out addresses of
// 127.B.200.0/24 (B: Options.AddressBlock), by reservation for the MACs
// it was told of and from .100 on for the others, each MAC keeping its
// address. Incus does not see these leases, as on a real home network.

// The example's Talos VMs' fixed MACs (examples/homelab's node_mac and
// rehearsal_mac defaults), reserved by the lab's router.
const (
	NodeMAC      = "10:66:6a:4d:16:50"
	RehearsalMAC = "10:66:6a:4d:16:51"
)

// lanBridge is the lab host's bridge to the LAN, named after its
// interface as IncusOS names it (the example's lan_bridge default).
const lanBridge = "enp5s0"

type router struct {
	block int

	mu           sync.Mutex
	reservations map[string]string // MAC -> address
	dynamic      map[string]string // MAC -> address, given out
	next         int
}

// The hosts of the reservations the lab's router starts with.
const nodeHost, rehearsalHost = 50, 51

func newRouter(block int) *router {
	r := &router{block: block, reservations: map[string]string{}, dynamic: map[string]string{}, next: 100}
	r.reservations[NodeMAC] = r.addr(nodeHost)
	r.reservations[RehearsalMAC] = r.addr(rehearsalHost)
	return r
}

func (r *router) addr(host int) string { return fmt.Sprintf("127.%d.200.%d", r.block, host) }

// lease is the address the router gives mac: its reservation, else the
// dynamic address it gave it before, else the next free one.
func (r *router) lease(mac string) string {
	mac = strings.ToLower(mac)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.reservations[mac]; ok {
		return a
	}
	if a, ok := r.dynamic[mac]; ok {
		return a
	}
	if r.next > 254 {
		return ""
	}
	a := r.addr(r.next)
	r.next++
	r.dynamic[mac] = a
	return a
}

// reserve sets (addr non-empty) or removes mac's reservation.
func (r *router) reserve(mac, addr string) error {
	mac = strings.ToLower(mac)
	if _, err := net.ParseMAC(mac); err != nil {
		return fmt.Errorf("lab router: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if addr == "" {
		delete(r.reservations, mac)
		return nil
	}
	if net.ParseIP(addr) == nil {
		return fmt.Errorf("lab router: %q is not an IP address", addr)
	}
	r.reservations[mac] = addr
	return nil
}

// Reserve makes the router give addr to mac from its next lease on; an
// empty addr removes the reservation (the MAC then gets a dynamic
// address): what a user does in the router's web page.
func (h *Home) Reserve(mac, addr string) error { return h.router.reserve(mac, addr) }

// Reserved is the address the router reserves for mac, "" for none.
func (h *Home) Reserved(mac string) string {
	h.router.mu.Lock()
	defer h.router.mu.Unlock()
	return h.router.reservations[strings.ToLower(mac)]
}

// LANBridge is the Incus host's bridge to the LAN (examples/homelab's
// lan_bridge).
func (h *Home) LANBridge() string { return lanBridge }

// NodeAddress is the address the router reserves for NodeMAC when the
// lab starts (the example's node_address).
func (h *Home) NodeAddress() string { return h.router.addr(nodeHost) }

// RehearsalAddress is the one it reserves for RehearsalMAC.
func (h *Home) RehearsalAddress() string { return h.router.addr(rehearsalHost) }
