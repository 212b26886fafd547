package home

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	// path keeps the reservations (DIR/router.json), as a router's web
	// page does: another process (migrate-lab reserve) may change them.
	path string

	mu           sync.Mutex
	reservations map[string]string // MAC -> address: the file's, as last read
	read         os.FileInfo       // the file they were read from
	dynamic      map[string]string // MAC -> address, given out
	next         int
}

// The hosts of the reservations the lab's router starts with.
const nodeHost, rehearsalHost = 50, 51

// RouterFile is where a lab's router keeps its reservations, under its
// directory.
const RouterFile = "router.json"

func newRouter(block int, dir string) (*router, error) {
	r := &router{block: block, path: filepath.Join(dir, RouterFile), reservations: map[string]string{}, dynamic: map[string]string{}, next: 100}
	// A lab starts with the example's two reservations, whatever an
	// earlier lab in dir was told.
	if err := writeReservations(r.path, map[string]string{NodeMAC: r.addr(nodeHost), RehearsalMAC: r.addr(rehearsalHost)}); err != nil {
		return nil, fmt.Errorf("lab router: %w", err)
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *router) addr(host int) string { return fmt.Sprintf("127.%d.200.%d", r.block, host) }

// load reads the reservations again when the file was replaced since
// (every write replaces it whole: a stat tells), r.mu held or before r is
// shared. A lease is then a stat, not a read and a parse.
func (r *router) load() error {
	fi, err := os.Stat(r.path)
	if err != nil {
		return fmt.Errorf("lab router: %w", err)
	}
	if r.read != nil && os.SameFile(r.read, fi) {
		return nil
	}
	m, err := readReservations(r.path)
	if err != nil {
		return err
	}
	r.reservations, r.read = m, fi
	return nil
}

// lease is the address the router gives mac: its reservation, else the
// dynamic address it gave it before, else the next free one.
func (r *router) lease(mac string) string {
	mac = strings.ToLower(mac)
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.load() // a file being replaced keeps the reservations last read
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := reserveIn(r.path, mac, addr); err != nil {
		return err
	}
	return r.load()
}

// ReserveIn sets (addr non-empty) or removes mac's reservation in the
// router of the lab in dir, from any process: what `migrate-lab reserve`
// does, as a user would in the router's web page.
func ReserveIn(dir, mac, addr string) error {
	path := filepath.Join(dir, RouterFile)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no lab's router in %s (no %s there): start one with `migrate-lab serve --dir %s`", dir, RouterFile, dir)
	}
	return reserveIn(path, mac, addr)
}

func reserveIn(path, mac, addr string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("lab router: %w", err)
	}
	if addr != "" && net.ParseIP(addr) == nil {
		return fmt.Errorf("lab router: %q is not an IP address", addr)
	}
	// One writer at a time: the lab and migrate-lab reserve.
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("lab router: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lab router: %w", err)
	}
	m, err := readReservations(path)
	if err != nil {
		return err
	}
	if addr == "" {
		delete(m, hw.String())
	} else {
		m[hw.String()] = addr
	}
	return writeReservations(path, m)
}

func readReservations(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lab router: %w", err)
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("lab router: %s: %w", path, err)
	}
	return m, nil
}

// writeReservations replaces the file whole (a reader sees the old one or
// the new one).
func writeReservations(path string, m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Reserve makes the router give addr to mac from its next lease on; an
// empty addr removes the reservation (the MAC then gets a dynamic
// address): what a user does in the router's web page.
func (h *Home) Reserve(mac, addr string) error { return h.router.reserve(mac, addr) }

// Reserved is the address the router reserves for mac, "" for none.
func (h *Home) Reserved(mac string) string {
	h.router.mu.Lock()
	defer h.router.mu.Unlock()
	_ = h.router.load()
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
