package incushost_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/homelab-migrate/migrate/lab/incushost"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// TestLAN: a VM bridged onto the host's LAN bridge boots at the address
// the LAN's DHCP server leases to its MAC, and Incus reports none (it
// does not see that lease, and the VM runs no agent); the bridge is
// listed as the host's own, unmanaged; a NIC on the managed bridge keeps
// the address the host gives.
func TestLAN(t *testing.T) {
	var (
		mu    sync.Mutex
		specs []incushost.VMSpec
		asked []string
	)
	boot := func(_ context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		mu.Lock()
		defer mu.Unlock()
		specs = append(specs, spec)
		return &fakeGuest{}, nil
	}
	lease := func(mac string) string {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, mac)
		if mac == "10:66:6a:4d:16:50" {
			return "127.0.200.50"
		}
		return ""
	}
	_, c := lab(t, incushost.Options{BootVM: boot, LAN: "enp5s0", LANLease: lease})
	ctx := ctxT(t)

	nets, err := c.Networks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lan *incusapi.Network
	for i := range nets {
		if nets[i].Name == "enp5s0" {
			lan = &nets[i]
		}
	}
	if lan == nil || lan.Managed || lan.Type != "bridge" {
		t.Fatalf("the LAN bridge in the networks: %+v", nets)
	}
	if _, err := c.NetworkLeases(ctx, "enp5s0"); err == nil {
		t.Fatal("an unmanaged bridge has leases")
	}

	if err := c.ImportStorageVolume(ctx, "default", "talos-iso", "iso", strings.NewReader("an ISO image")); err != nil {
		t.Fatal(err)
	}
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{
			"root": {"type": "disk", "path": "/", "pool": "default"},
			"iso":  {"type": "disk", "pool": "default", "source": "talos-iso", "boot.priority": "10"},
			"eth0": {"type": "nic", "nictype": "bridged", "parent": "enp5s0", "hwaddr": "10:66:6A:4D:16:50"},
		}}, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(specs) != 1 || specs[0].IPv4 != "127.0.200.50" || !specs[0].LAN {
		t.Fatalf("the VM on the LAN boots at its reservation: %+v", specs)
	}
	if len(asked) != 1 || asked[0] != "10:66:6a:4d:16:50" {
		t.Fatalf("the router was asked for %v, want the NIC's MAC", asked)
	}
	mu.Unlock()
	st, err := c.InstanceState(ctx, "talos")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := st.Network["eth0"]; !ok || len(n.Addresses) != 0 || n.Hwaddr != "10:66:6a:4d:16:50" {
		t.Fatalf("Incus reports the LAN lease it cannot see: %+v", st.Network)
	}

	// A NIC on the managed bridge has the host's address.
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "nat", Type: "container", Start: true,
		Source:      incusapi.InstanceSource{Type: "image", Alias: image},
		InstancePut: incusapi.InstancePut{Devices: map[string]map[string]string{"eth0": {"type": "nic", "network": "labbr0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.InstanceState(ctx, "nat")
	if err != nil || len(st.Network["eth0"].Addresses) == 0 {
		t.Fatalf("a NIC of the managed bridge: %+v %v", st, err)
	}
}

// TestLANPhysical: IncusOS after its direct-attach tutorial lists, beside
// the LAN bridge, a managed network of type physical over it; a VM whose
// NIC names that network is on the LAN and boots at its reservation; a
// NIC naming it with a nictype or a parent is refused, as Incus refuses
// it.
func TestLANPhysical(t *testing.T) {
	var (
		mu    sync.Mutex
		specs []incushost.VMSpec
	)
	boot := func(_ context.Context, spec incushost.VMSpec) (incushost.Guest, error) {
		mu.Lock()
		defer mu.Unlock()
		specs = append(specs, spec)
		return &fakeGuest{}, nil
	}
	lease := func(mac string) string {
		if mac == "10:66:6a:4d:16:51" {
			return "127.0.200.51"
		}
		return ""
	}
	_, c := lab(t, incushost.Options{BootVM: boot, LAN: "enp5s0", LANPhysical: "lan", LANLease: lease})
	ctx := ctxT(t)
	n, err := c.Network(ctx, "lan")
	if err != nil || n.Type != "physical" || !n.Managed || n.Config["parent"] != "enp5s0" {
		t.Fatalf("the physical LAN network: %+v %v", n, err)
	}
	devices := func(nic map[string]string) map[string]map[string]string {
		return map[string]map[string]string{"root": {"type": "disk", "path": "/", "pool": "default"}, "eth0": nic,
			"iso": {"type": "disk", "pool": "default", "source": "talos-iso", "boot.priority": "10"}}
	}
	if err := c.ImportStorageVolume(ctx, "default", "talos-iso", "iso", strings.NewReader("an ISO image")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{
		{"type": "nic", "network": "lan", "nictype": "bridged", "hwaddr": "10:66:6a:4d:16:51"},
		{"type": "nic", "network": "lan", "parent": "enp5s0", "hwaddr": "10:66:6a:4d:16:51"},
	} {
		err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: "refused", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
			InstancePut: incusapi.InstancePut{Devices: devices(bad)}})
		if err == nil || !strings.Contains(err.Error(), "in conjunction with \"network\" property") {
			t.Errorf("a NIC %v: %v, want Incus's refusal", bad, err)
		}
	}
	err = c.CreateInstance(ctx, incusapi.InstancesPost{Name: "talos", Type: "virtual-machine", Source: incusapi.InstanceSource{Type: "none"},
		InstancePut: incusapi.InstancePut{Devices: devices(map[string]string{"type": "nic", "network": "lan", "hwaddr": "10:66:6a:4d:16:51"})}, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(specs) != 1 || specs[0].IPv4 != "127.0.200.51" || !specs[0].LAN {
		t.Fatalf("the VM on the physical LAN network boots at its reservation: %+v", specs)
	}
}
