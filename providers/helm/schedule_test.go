package helm_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// talosNode is a node_spec as talos_machine_config's node output gives
// it: a control plane, tainted unless scheduling on it is allowed.
func talosNode(tainted bool) cty.Value {
	taints := cty.ListValEmpty(cty.Object(map[string]cty.Type{"key": cty.String, "value": cty.String, "effect": cty.String}))
	if tainted {
		taints = cty.ListVal([]cty.Value{obj(map[string]cty.Value{"key": str("node-role.kubernetes.io/control-plane"), "value": str(""), "effect": str("NoSchedule")})})
	}
	return obj(map[string]cty.Value{
		"name":            str("talos-home"),
		"labels":          strMap(map[string]string{"kubernetes.io/hostname": "talos-home", "node-role.kubernetes.io/control-plane": ""}),
		"taints":          taints,
		"system_reserved": strMap(map[string]string{"cpu": "50m", "memory": "512Mi"}),
	})
}

// TestSchedulingPreflightBeforeTheCluster: before the cluster exists,
// the pods of a Job and of a release are judged against the node that
// kubernetes_ready's node_spec says the cluster will have: a tainted
// control plane refuses them, naming the taint and the machine config's
// fix; a node that allows scheduling takes them; requests above the
// VM's size are refused; a pod that tolerates the taint passes.
func TestSchedulingPreflightBeforeTheCluster(t *testing.T) {
	t.Parallel()
	job := func(tolerate bool, cpu string) cty.Value {
		spec := map[string]cty.Value{"restartPolicy": str("Never")}
		if tolerate {
			spec["tolerations"] = cty.TupleVal([]cty.Value{obj(map[string]cty.Value{"key": str("node-role.kubernetes.io/control-plane"), "operator": str("Exists"), "effect": str("NoSchedule")})})
		}
		if cpu != "" {
			spec["container"] = obj(map[string]cty.Value{"resources": obj(map[string]cty.Value{"requests": obj(map[string]cty.Value{"cpu": str(cpu)})})})
		}
		return podTemplate(nil, spec)
	}
	for _, tc := range []struct {
		name     string
		tainted  bool
		tolerate bool
		cpu      string
		refused  []string
	}{
		{name: "tainted control plane", tainted: true, refused: []string{"Pods Would Not Schedule", "Job media/probe", "node talos-home: untolerated taint node-role.kubernetes.io/control-plane:NoSchedule", "allowSchedulingOnControlPlanes: true"}},
		{name: "scheduling allowed"},
		{name: "tolerated", tainted: true, tolerate: true},
		{name: "requests above the VM", cpu: "3", refused: []string{"insufficient cpu: the pod requests 3, the node has 1950m allocatable", "lower the pod's requests"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := offline(t, nil)
			kubeconfig := str(filepath.Join(t.TempDir(), "kubeconfig.age"))
			ready := obj(map[string]cty.Value{"kubeconfig": kubeconfig, "node_spec": talosNode(tc.tainted),
				"node_capacity": obj(map[string]cty.Value{"cpu": cty.NumberIntVal(2), "memory": str("4GiB")})})
			r := mustPlan(t, p, helm.Ready, "rehearsal", ready)
			taints := "none"
			if tc.tainted {
				taints = "node-role.kubernetes.io/control-plane:NoSchedule"
			}
			contains(t, "the plan of kubernetes_ready", r.Diff, "node talos-home as its machine config makes it: taints "+taints+", allocatable cpu 1950m, memory 3484Mi")

			cfg := obj(map[string]cty.Value{"namespace": str("media"), "name": str("probe"), "job": job(tc.tolerate, tc.cpu), "kubeconfig": kubeconfig})
			r = plan(t, p, helm.Job, "probe", cfg)
			if tc.refused == nil {
				if r.Diagnostics.HasErrors() {
					t.Fatalf("refused: %v", r.Diagnostics.Err())
				}
				contains(t, "the plan of the Job", r.Diff, "scheduling: judged against node talos-home as its machine config makes it")
				return
			}
			if !r.Diagnostics.HasErrors() {
				t.Fatalf("the Job planned:\n%s", r.Diff)
			}
			contains(t, "the diagnostic", fmt.Sprint(r.Diagnostics), tc.refused...)
		})
	}
}

// TestSchedulingPreflightOfAReleaseBeforeTheCluster: a chart rendered
// client-side is judged too, against the node of its own kubeconfig only.
func TestSchedulingPreflightOfAReleaseBeforeTheCluster(t *testing.T) {
	t.Parallel()
	p := offline(t, nil)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig.age")
	mustPlan(t, p, helm.Ready, "node", obj(map[string]cty.Value{"kubeconfig": str(kubeconfig), "node_spec": talosNode(true)}))
	rel := obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"), "kubeconfig": str(kubeconfig)})
	r := plan(t, p, helm.Release, "app", rel)
	if !r.Diagnostics.HasErrors() {
		t.Fatalf("the release planned on a tainted node:\n%s", r.Diff)
	}
	contains(t, "the diagnostic", fmt.Sprint(r.Diagnostics), "release app", "Deployment web/app", "untolerated taint node-role.kubernetes.io/control-plane:NoSchedule")

	// Another cluster's kubeconfig: no node known, nothing judged.
	other := obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"), "kubeconfig": str(filepath.Join(t.TempDir(), "other"))})
	r = mustPlan(t, p, helm.Release, "app", other)
	if !strings.Contains(r.Diff, "scheduling: not judged: the cluster does not answer yet and no kubernetes_ready step") {
		t.Errorf("the plan does not say that nothing was judged:\n%s", r.Diff)
	}
}
