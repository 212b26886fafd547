package talos

import (
	"maps"
	"slices"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// nodeOutputs is the node output of talos_machine_config.
type nodeOutputs struct {
	Name   string            `cty:"name"`
	Labels map[string]string `cty:"labels"`
	Taints []nodeTaint       `cty:"taints"`
	// SystemReserved is what Talos' kubelet keeps from pods (its
	// systemReserved, by machine type): capacity minus it, and kubelet's
	// hard eviction threshold, is allocatable.
	SystemReserved map[string]string `cty:"system_reserved"`
}

// nodeTaint is one taint of the Kubernetes node a machine config makes.
type nodeTaint struct {
	Key    string `cty:"key"`
	Value  string `cty:"value"`
	Effect string `cty:"effect"`
}

// controlPlaneTaint is the taint Talos puts on a control-plane node unless
// cluster.allowSchedulingOnControlPlanes is true.
const controlPlaneTaint = "node-role.kubernetes.io/control-plane"

// nodeOf is the Kubernetes node the rendered config registers, as Talos
// registers it: its hostname (its HostnameConfig document; "" when the
// node picks one itself), the
// kubelet's labels with the control-plane role and machine.nodeLabels,
// and the control-plane taint unless scheduling on control planes is
// allowed, then machine.nodeTaints ("VALUE:EFFECT" or "EFFECT").
func nodeOf(cfg coreconfig.Provider) nodeOutputs {
	name, labels, taints := nodeMeta(cfg)
	reserved := map[string]string{"cpu": constants.KubeletSystemReservedCPU, "memory": constants.KubeletSystemReservedMemoryWorker,
		"ephemeral-storage": constants.KubeletSystemReservedEphemeralStorage}
	if cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		reserved["memory"] = constants.KubeletSystemReservedMemoryControlPlane
	}
	return nodeOutputs{Name: name, Labels: labels, Taints: taints, SystemReserved: reserved}
}

// nodeMeta is nodeOf's name, labels and taints.
func nodeMeta(cfg coreconfig.Provider) (name string, labels map[string]string, taints []nodeTaint) {
	if h := cfg.NetworkHostnameConfig(); h != nil {
		name = h.Hostname()
	}
	labels = map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	if name != "" {
		labels["kubernetes.io/hostname"] = name
	}
	taints = []nodeTaint{}
	if cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		labels[controlPlaneTaint] = ""
		labels["node.kubernetes.io/exclude-from-external-load-balancers"] = ""
	}
	// K8sNodeConfig reads 1.13's v1alpha1 (machine.nodeLabels and
	// nodeTaints, with the control-plane taint unless
	// cluster.allowSchedulingOnControlPlanes) and 1.14's KubeNodeConfig
	// document (where config generation writes that taint) alike.
	node := cfg.K8sNodeConfig()
	if node == nil {
		return name, labels, taints
	}
	maps.Copy(labels, node.Labels())
	for _, key := range slices.Sorted(maps.Keys(node.Taints())) {
		v := node.Taints()[key]
		value, effect := "", v
		if i := strings.LastIndex(v, ":"); i >= 0 {
			value, effect = v[:i], v[i+1:]
		}
		taints = append(taints, nodeTaint{Key: key, Value: value, Effect: effect})
	}
	return name, labels, taints
}
