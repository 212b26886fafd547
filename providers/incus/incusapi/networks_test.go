package incusapi

import (
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
)

// TestNetworkLeases: the managed test network lists its gateway among its
// leases; an unknown network is not found.
func TestNetworkLeases(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 30*time.Second)
	leases, err := c.NetworkLeases(ctx, incustest.Network)
	if err != nil {
		t.Fatalf("NetworkLeases %s: %v (scripts/incus-up.sh creates it)", incustest.Network, err)
	}
	gateway := false
	for _, l := range leases {
		gateway = gateway || l.Type == "gateway" && l.Address != ""
	}
	if !gateway {
		t.Errorf("leases of %s = %+v, want a gateway entry", incustest.Network, leases)
	}
	if _, err := c.NetworkLeases(ctx, uniqueName("nonet")); !IsNotFound(err) {
		t.Errorf("leases of an unknown network: %v, want not found", err)
	}
}
