package talosvm

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/homelab-migrate/migrate/lab/kubecp"
	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// TestNodeTaints: as Talos, a control plane is tainted NoSchedule unless
// cluster.allowSchedulingOnControlPlanes; a worker is not; and
// machine.nodeTaints add theirs.
func TestNodeTaints(t *testing.T) {
	in, err := talosnode.UserInput("taints", generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}
	in.ControlPlaneEndpoint = "https://127.0.0.1:6443"
	controlPlane := kubecp.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}
	for _, tc := range []struct {
		name  string
		typ   machinetype.Type
		patch string
		want  []kubecp.Taint
	}{
		{"control plane", machinetype.TypeControlPlane, "", []kubecp.Taint{controlPlane}},
		{"control plane that schedules", machinetype.TypeControlPlane, "cluster:\n  allowSchedulingOnControlPlanes: true\n", nil},
		{"worker", machinetype.TypeWorker, "", nil},
		{"node taints", machinetype.TypeControlPlane, "cluster:\n  allowSchedulingOnControlPlanes: true\nmachine:\n  nodeTaints:\n    gpu: intel:NoExecute\n    dedicated: PreferNoSchedule\n",
			[]kubecp.Taint{{Key: "dedicated", Effect: "PreferNoSchedule"}, {Key: "gpu", Value: "intel", Effect: "NoExecute"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := in.Config(tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			if tc.patch != "" {
				p, err := configpatcher.LoadPatch([]byte(tc.patch))
				if err != nil {
					t.Fatal(err)
				}
				out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), []configpatcher.Patch{p})
				if err != nil {
					t.Fatal(err)
				}
				if cfg, err = out.Config(); err != nil {
					t.Fatal(err)
				}
			}
			got := nodeTaints(cfg)
			if len(got) != len(tc.want) {
				t.Fatalf("taints %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("taint %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
