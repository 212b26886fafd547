// Package kubecp is the Kubernetes control plane of a lab Talos node
// (lab/talosnode through lab/talosvm) after its bootstrap: real processes,
// no simulation. etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok (the node's kubelet: it registers no container
// runtime, it turns the Node Ready and pods Running) are the binaries
// scripts/build-kube.sh builds from the Go module proxy into a cache,
// once (Binaries).
//
// Start runs them on one loopback address, as on a Talos control plane
// node: etcd on Addr:2379 (peer 2380, plain HTTP: only loopback), the API
// server on Addr:6443 with a serving certificate for Addr signed by the
// cluster CA of the machine config (so the node's Kubeconfig RPC, which
// signs an admin certificate with that CA, works against it), the service
// account key of the machine config, and PodSecurity admission as Talos
// configures it (enforce baseline, audit and warn restricted, kube-system
// exempt; the same file as scripts/kube-up.sh). The Node object is
// registered under the node's hostname, schedulable (Talos' single-node
// clusters schedule on the control plane), and kwok keeps it Ready.
//
// Stop ends them in order (kwok, scheduler, controller manager, API
// server, etcd): TERM, then KILL after a grace period, each waited for, so
// no zombie stays. The processes are started with a parent-death signal:
// a test or lab killed hard does not leave them running.
//
// Differences from a real node: etcd without TLS; one client certificate
// (system:masters) for the controller manager, scheduler and kwok; no
// kube-proxy, CoreDNS, flannel or kubelet (kwok runs no container).
package kubecp
