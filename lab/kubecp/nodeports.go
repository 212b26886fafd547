package kubecp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// kube-proxy's part for NodePort Services: the lab has no kube-proxy, so
// the control plane listens on the node's address at each NodePort (TCP)
// and forwards each connection to a Ready pod of the Service's selector
// on this node, at its targetPort, as kube-proxy's rules do. ClusterIPs
// are not routed.

// nodePortPoll is how long to pause before listing the Services again
// when watching them fails; otherwise a change is seen as kube-proxy
// sees it, from a watch, within milliseconds (a NodePort refused for a
// second after its Service was made would lengthen every service's
// measured downtime by it).
var nodePortPoll = time.Second

type nodePort struct {
	ns, service string
	port        corev1.ServicePort
}

// serveNodePorts keeps a listener per NodePort of the cluster's Services
// until ctx ends.
func (c *ControlPlane) serveNodePorts(ctx context.Context) {
	defer c.runners.Done()

	listeners := map[int32]net.Listener{}
	refused := map[int32]bool{} // ports another process holds: said once

	var (
		mu     sync.Mutex
		routes = map[int32]nodePort{}
	)

	defer func() {
		for _, l := range listeners {
			l.Close() //nolint:errcheck
		}
	}()

	for {
		var list corev1.ServiceList
		if err := c.do(ctx, http.MethodGet, "/api/v1/services", "application/json", nil, &list); err == nil {
			want := map[int32]nodePort{}

			for _, svc := range list.Items {
				if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
					continue
				}

				for _, sp := range svc.Spec.Ports {
					if sp.NodePort != 0 && (sp.Protocol == "" || sp.Protocol == corev1.ProtocolTCP) {
						want[sp.NodePort] = nodePort{ns: svc.Namespace, service: svc.Name, port: sp}
					}
				}
			}

			mu.Lock()
			routes = want
			mu.Unlock()

			for port, l := range listeners {
				if _, ok := want[port]; !ok {
					l.Close() //nolint:errcheck
					delete(listeners, port)
				}
			}

			for port := range want {
				if listeners[port] != nil {
					continue
				}

				l, err := net.Listen("tcp", net.JoinHostPort(c.cfg.Addr, strconv.Itoa(int(port))))
				if err != nil {
					if !refused[port] {
						c.cfg.logf("kubecp: NodePort %d: %v", port, err)
					}

					refused[port] = true

					continue
				}

				delete(refused, port)

				listeners[port] = l

				go c.acceptNodePort(ctx, l, func() (nodePort, bool) {
					mu.Lock()
					defer mu.Unlock()

					r, ok := routes[port]

					return r, ok
				})
			}
		}

		if c.watchChange(ctx, "/api/v1/services", list.ResourceVersion) == nil {
			continue
		}

		select {
		case <-ctx.Done():
			return
		case <-time.After(nodePortPoll):
		}
	}
}

// watchChange returns when a watch of the collection at path from
// resourceVersion rv reports a change, or after half a minute without
// one; an error when the watch cannot be made (the caller pauses).
func (c *ControlPlane) watchChange(ctx context.Context, path, rv string) error {
	if rv == "" {
		return fmt.Errorf("no resourceVersion to watch from")
	}

	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("https://%s:%d%s?watch=1&timeoutSeconds=30&allowWatchBookmarks=false&resourceVersion=%s", c.cfg.Addr, APIPort, path, url.QueryEscape(rv)), nil)
	if err != nil {
		return err
	}

	resp, err := c.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck

	if resp.StatusCode >= 300 {
		return fmt.Errorf("watch %s: HTTP %d", path, resp.StatusCode)
	}

	// The first event (a line of JSON), or the end of the watch.
	if _, err := bufio.NewReader(resp.Body).ReadBytes('\n'); err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}

	return nil
}

func (c *ControlPlane) acceptNodePort(ctx context.Context, l net.Listener, route func() (nodePort, bool)) {
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}

		go func() {
			defer conn.Close() //nolint:errcheck

			r, ok := route()
			if !ok {
				return
			}

			backend, err := c.endpoint(ctx, r)
			if err != nil {
				return // as kube-proxy with no endpoint: the connection is refused
			}

			up, err := net.DialTimeout("tcp", backend, 5*time.Second)
			if err != nil {
				return
			}
			defer up.Close() //nolint:errcheck

			done := make(chan struct{}, 2)

			go func() { io.Copy(up, conn); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()   //nolint:errcheck
			go func() { io.Copy(conn, up); conn.(*net.TCPConn).CloseWrite(); done <- struct{}{} }() //nolint:errcheck

			<-done
			<-done
		}()
	}
}

// endpoint is a Ready pod of the route's Service on this node, as
// podIP:targetPort.
func (c *ControlPlane) endpoint(ctx context.Context, r nodePort) (string, error) {
	var svc corev1.Service
	if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+r.ns+"/services/"+r.service, "application/json", nil, &svc); err != nil {
		return "", err
	}

	if len(svc.Spec.Selector) == 0 {
		return "", fmt.Errorf("service %s/%s has no selector", r.ns, r.service)
	}

	var pods corev1.PodList

	q := "/api/v1/namespaces/" + r.ns + "/pods?labelSelector=" + url.QueryEscape(labels.SelectorFromSet(svc.Spec.Selector).String()) +
		"&fieldSelector=" + url.QueryEscape("spec.nodeName="+c.cfg.NodeName)
	if err := c.do(ctx, http.MethodGet, q, "application/json", nil, &pods); err != nil {
		return "", err
	}

	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || !podReady(&pod) {
			continue
		}

		for _, ctr := range pod.Spec.Containers {
			target := r.port.TargetPort
			if target.IntValue() == 0 && target.StrVal == "" {
				return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(r.port.Port))), nil
			}

			if port, err := containerPort(target, ctr); err == nil {
				return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)), nil
			}
		}
	}

	return "", fmt.Errorf("service %s/%s has no Ready endpoint on the node", r.ns, r.service)
}

// serviceAddress is the cluster DNS of the lab's app pods: a Service's
// name as a pod of namespace ns writes it (NAME, NAME.NS,
// NAME.NS.svc[.cluster.local]) -> the address of a Ready pod it selects
// on the node (ClusterIPs are not routed in the lab: the pod's own
// address, as a headless Service's name resolves). An IP, or a name with
// no Service, is returned as is (the host's resolver then has it).
func (c *ControlPlane) serviceAddress(ctx context.Context, ns, host string) (string, error) {
	if net.ParseIP(host) != nil {
		return host, nil
	}

	name := strings.TrimSuffix(strings.TrimSuffix(host, ".cluster.local"), ".svc")
	if n, other, ok := strings.Cut(name, "."); ok {
		if strings.Contains(other, ".") {
			return host, nil
		}

		name, ns = n, other
	}

	var svc corev1.Service
	if err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/services/"+name, "application/json", nil, &svc); err != nil {
		return host, nil //nolint:nilerr // not a Service of the cluster
	}

	ep, err := c.endpoint(ctx, nodePort{ns: ns, service: name, port: corev1.ServicePort{Port: 1}})
	if err != nil {
		return "", err
	}

	ip, _, err := net.SplitHostPort(ep)

	return ip, err
}

func podReady(pod *corev1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}

	return false
}
