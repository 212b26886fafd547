package kubecp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The cluster DNS of sandboxed containers (Job pods, and app pods of
// userland images): the lab runs no DNS server and routes no ClusterIP,
// so, as kubelet writes a pod's /etc/hosts, the node writes one into the
// container's root at each start that also names the Services: each
// Service of the cluster with a Ready pod on the node as NAME.NS,
// NAME.NS.svc and NAME.NS.svc.cluster.local (and NAME in the pod's own
// namespace) -> that pod's address, as a headless Service's name
// resolves. A Service's port is not remapped to its targetPort: a client
// connects to the pod's port.

// hostsHeader is kubelet's first line, then the lab's why.
const hostsHeader = "# Kubernetes-managed hosts file.\n" +
	"# The lab's node has no cluster DNS: its Services are named here, each -> a Ready pod's address\n" +
	"# (no ClusterIP; connect to the pod's port, the Service's targetPort).\n"

// writeHosts writes root/etc/hosts for a container of pod.
func (c *ControlPlane) writeHosts(ctx context.Context, pod *corev1.Pod, root string) error {
	var b strings.Builder

	b.WriteString(hostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")

	if pod.Status.PodIP != "" {
		fmt.Fprintf(&b, "%s\t%s\n", pod.Status.PodIP, pod.Name)
	}

	for _, line := range c.serviceHosts(ctx, pod.Namespace) {
		b.WriteString(line + "\n")
	}

	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return err
	}

	tmp := filepath.Join(root, "etc", ".hosts.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}

	return os.Rename(tmp, filepath.Join(root, "etc", "hosts"))
}

// serviceHosts are the hosts lines of the cluster's Services that have a
// Ready pod on the node, sorted; a Service without one is left out (its
// name does not resolve, and nothing would answer it).
func (c *ControlPlane) serviceHosts(ctx context.Context, ns string) []string {
	var list corev1.ServiceList
	if err := c.do(ctx, http.MethodGet, "/api/v1/services", "application/json", nil, &list); err != nil {
		return nil
	}

	var lines []string

	for _, svc := range list.Items {
		if len(svc.Spec.Selector) == 0 {
			continue
		}

		ep, err := c.endpoint(ctx, nodePort{ns: svc.Namespace, service: svc.Name, port: corev1.ServicePort{Port: 1}})
		if err != nil {
			continue
		}

		ip, _, err := net.SplitHostPort(ep)
		if err != nil {
			continue
		}

		names := []string{svc.Name + "." + svc.Namespace, svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace + ".svc.cluster.local"}
		if svc.Namespace == ns {
			names = append([]string{svc.Name}, names...)
		}

		lines = append(lines, ip+"\t"+strings.Join(names, " "))
	}

	sort.Strings(lines)

	return lines
}
