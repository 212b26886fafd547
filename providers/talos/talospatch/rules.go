package talospatch

import (
	"gopkg.in/yaml.v3"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
)

// A rule moves one v1alpha1 key (a path in the v1alpha1 document of a
// patch) into typed documents, from the release whose contract rejects
// it beside the document its base config carries.
type rule struct {
	path  []string
	since *coreconfig.VersionContract
	// move decodes the key's value (with machinery's v1alpha1 types) into
	// the documents being built. It returns the kind written and the
	// sub-keys it could not move, each with what to do: those stay in the
	// patch.
	move func(v *yaml.Node, out *docs) (into string, left map[string]string, err error)
}

// Rules are the keys rewritten, in the order they are looked for. The
// contracts are machinery's: generate stops writing the v1alpha1 field
// (config/generate/init.go, kubernetes.go) and the typed document's
// V1Alpha1ConflictValidate refuses it (config/types/k8s/node.go,
// kubelet.go, apiserver.go, proxy.go, coredns.go; network/hostname.go,
// resolver.go; runtime/unattended_install.go; k8s/network.go and
// flannel.go).
var rules = []rule{
	{path: []string{"machine", "network", "hostname"}, since: coreconfig.TalosVersion1_12, move: moveHostname},
	{path: []string{"cluster", "allowSchedulingOnControlPlanes"}, since: coreconfig.TalosVersion1_14, move: moveScheduling},
	{path: []string{"cluster", "allowSchedulingOnMasters"}, since: coreconfig.TalosVersion1_14, move: moveScheduling},
	{path: []string{"machine", "nodeLabels"}, since: coreconfig.TalosVersion1_14, move: moveNodeLabels},
	{path: []string{"machine", "nodeAnnotations"}, since: coreconfig.TalosVersion1_14, move: moveNodeAnnotations},
	{path: []string{"machine", "nodeTaints"}, since: coreconfig.TalosVersion1_14, move: moveNodeTaints},
	{path: []string{"machine", "kubelet"}, since: coreconfig.TalosVersion1_14, move: moveKubelet},
	{path: []string{"machine", "install"}, since: coreconfig.TalosVersion1_14, move: moveInstall},
	{path: []string{"machine", "network", "nameservers"}, since: coreconfig.TalosVersion1_14, move: moveNameservers},
	{path: []string{"machine", "network", "searchDomains"}, since: coreconfig.TalosVersion1_14, move: moveSearchDomains},
	{path: []string{"machine", "network", "disableSearchDomain"}, since: coreconfig.TalosVersion1_14, move: moveDisableSearchDomain},
	{path: []string{"machine", "features", "hostDNS"}, since: coreconfig.TalosVersion1_14, move: moveHostDNS},
	{path: []string{"cluster", "apiServer"}, since: coreconfig.TalosVersion1_14, move: moveAPIServer},
	{path: []string{"cluster", "proxy"}, since: coreconfig.TalosVersion1_14, move: moveProxy},
	{path: []string{"cluster", "coreDNS"}, since: coreconfig.TalosVersion1_14, move: moveCoreDNS},
	{path: []string{"cluster", "network"}, since: coreconfig.TalosVersion1_14, move: moveClusterNetwork},
}

// uncovered are the keys the 1.14 contract also rejects beside its typed
// documents but that no rule rewrites: each is reported with what to do.
var uncovered = []struct {
	path  []string
	since *coreconfig.VersionContract
	what  string
}{
	{[]string{"cluster", "discovery"}, coreconfig.TalosVersion1_14, "write a DiscoveryServiceConfig document"},
	{[]string{"cluster", "scheduler"}, coreconfig.TalosVersion1_14, "write a KubeSchedulerConfig document"},
	{[]string{"cluster", "controllerManager"}, coreconfig.TalosVersion1_14, "write a KubeControllerManagerConfig document"},
	{[]string{"machine", "features", "stableHostname"}, coreconfig.TalosVersion1_12, "set auto: stable (or off) in a HostnameConfig document"},
}
