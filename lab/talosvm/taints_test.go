package talosvm

import (
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
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

// TestNodeTaints114: a config rendered for Talos 1.14 carries the
// control-plane taint in its KubeNodeConfig document; the node registers
// with it, and without it once a patch deletes it.
func TestNodeTaints114(t *testing.T) {
	contract, err := talosconfig.ParseContractFromVersion("v1.14.1")
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("taints", "https://127.0.0.1:6443", talosnode.KubernetesVersionOf("v1.14.1"),
		generate.WithVersionContract(contract), generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.K8sNodeConfig() == nil || cfg.RawV1Alpha1().ClusterConfig.AllowSchedulingOnControlPlanes != nil { //nolint:staticcheck // the 1.13 field must be unset
		t.Fatal("the 1.14 config has no KubeNodeConfig document")
	}
	if got := nodeTaints(cfg); len(got) != 1 || got[0] != (kubecp.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: "NoSchedule"}) {
		t.Fatalf("taints %+v, want the control-plane taint", got)
	}
	if labels := nodeLabels(cfg); labels == nil {
		t.Error("no labels")
	} else if _, ok := labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("labels %v lack the control-plane role", labels)
	}
	p, err := configpatcher.LoadPatch([]byte("apiVersion: v1alpha1\nkind: KubeNodeConfig\ntaints:\n  node-role.kubernetes.io/control-plane:\n    $patch: delete\n"))
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
	if got := nodeTaints(cfg); len(got) != 0 {
		t.Fatalf("taints %+v after the patch deleting the taint", got)
	}
}
