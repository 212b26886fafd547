// Package scheduling judges pod templates against the nodes that will run
// them, before anything is applied: a pod that no node accepts is
// accepted by the API server and then stays Pending until its step's
// timeout, which on a Talos control plane is the default (it taints
// itself node-role.kubernetes.io/control-plane:NoSchedule unless
// cluster.allowSchedulingOnControlPlanes).
//
// The judgement is the scheduler's filters that need no other pod:
// unschedulable nodes, taints with effect NoSchedule or NoExecute that the
// pod does not tolerate, its nodeSelector and required node affinity (the
// scheduler's own helpers, k8s.io/component-helpers), and its requests
// against the node's allocatable resources (each pod on its own: the
// pods already running are not counted). Preferences and pod affinity are
// not judged. The nodes are the cluster's, or, before the cluster exists,
// the node its machine config is about to make (package helm builds it).
package scheduling
