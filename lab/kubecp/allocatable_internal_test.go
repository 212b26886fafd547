package kubecp

import "testing"

// TestAllocatable: the node leaves to pods what a Talos control plane's
// kubelet does: capacity minus systemReserved and the hard eviction.
func TestAllocatable(t *testing.T) {
	cpu, mem, err := allocatable("2", "4Gi")
	if err != nil || cpu != "1950m" || mem != "3484Mi" {
		t.Errorf("allocatable(2, 4Gi) = %s, %s, %v; want 1950m, 3484Mi", cpu, mem, err)
	}
	if _, _, err := allocatable("lots", "4Gi"); err == nil {
		t.Error("a cpu of \"lots\" was taken")
	}
}
