package incusapi

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
)

// TestPoolsAndNetworks: the test pool and network are read and listed
// (a network with whether it is managed); unknown ones are not found; a
// pool lists its custom volumes by name.
func TestPoolsAndNetworks(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 60*time.Second)
	if p, err := c.StoragePool(ctx, "default"); err != nil || p.Name != "default" {
		t.Fatalf("StoragePool default = %+v %v", p, err)
	}
	if _, err := c.StoragePool(ctx, uniqueName("nopool")); !IsNotFound(err) {
		t.Errorf("an unknown pool: %v, want not found", err)
	}
	if n, err := c.Network(ctx, incustest.Network); err != nil || n.Name != incustest.Network || !n.Managed {
		t.Fatalf("Network %s = %+v %v", incustest.Network, n, err)
	}
	if _, err := c.Network(ctx, uniqueName("nonet")); !IsNotFound(err) {
		t.Errorf("an unknown network: %v, want not found", err)
	}
	name := uniqueName("iapi-list")
	t.Cleanup(func() { _ = c.DeleteStorageVolume(context.Background(), "default", name) })
	if err := c.CreateStorageVolume(ctx, "default", StorageVolumesPost{Name: name, ContentType: "block",
		StorageVolumePut: StorageVolumePut{Config: map[string]string{"size": "8MiB"}}}); err != nil {
		t.Fatal(err)
	}
	if vols, err := c.StorageVolumes(ctx, "default"); err != nil || !slices.Contains(vols, name) || !slices.IsSorted(vols) {
		t.Errorf("StorageVolumes default = %v %v, want %s among them, sorted", vols, err, name)
	}
	if pools, err := c.StoragePools(ctx); err != nil || !slices.Contains(pools, "default") {
		t.Errorf("StoragePools = %v %v", pools, err)
	}
	nets, err := c.Networks(ctx)
	i := slices.IndexFunc(nets, func(n Network) bool { return n.Name == incustest.Network })
	if err != nil || i < 0 || !nets[i].Managed || !slices.IsSortedFunc(nets, func(a, b Network) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("Networks = %+v %v", nets, err)
	}
}
