package helm

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm/scheduling"
)

// nodeSpecAttrs is the node a machine config makes, as
// talos_machine_config's node output gives it.
type nodeSpecAttrs struct {
	Name           string            `cty:"name" optional:"true"`
	Labels         map[string]string `cty:"labels" optional:"true"`
	Taints         []taintAttrs      `cty:"taints" optional:"true"`
	SystemReserved map[string]string `cty:"system_reserved" optional:"true"`
}

type taintAttrs struct {
	Key    string `cty:"key"`
	Value  string `cty:"value" optional:"true"`
	Effect string `cty:"effect"`
}

// capacityAttrs is what the node's machine has (the VM's cpu and memory).
type capacityAttrs struct {
	CPU    string `cty:"cpu" optional:"true"`
	Memory string `cty:"memory" optional:"true"`
}

// evictionHardMemory is kubelet's default hard eviction threshold
// (memory.available<100Mi), which Talos keeps: it is not allocatable.
var evictionHardMemory = resource.MustParse("100Mi")

// expectedNode is the scheduling.Node a kubernetes_ready step says its
// cluster will have: allocatable = capacity - system reserved - hard
// eviction, as kubelet computes it.
func expectedNode(spec nodeSpecAttrs, capacity *capacityAttrs) (scheduling.Node, error) {
	n := scheduling.Node{Name: spec.Name, Labels: spec.Labels}
	if n.Name == "" {
		n.Name = "(the node)"
	}
	for _, t := range spec.Taints {
		n.Taints = append(n.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	if capacity == nil {
		return n, nil
	}
	n.Allocatable = corev1.ResourceList{}
	for name, amount := range map[corev1.ResourceName]string{corev1.ResourceCPU: capacity.CPU, corev1.ResourceMemory: capacity.Memory} {
		if amount == "" {
			continue
		}
		q, err := quantityOf(amount)
		if err != nil {
			return n, fmt.Errorf("node_capacity %s %q: %v", name, amount, err)
		}
		if r, ok := spec.SystemReserved[string(name)]; ok {
			rq, err := resource.ParseQuantity(r)
			if err != nil {
				return n, fmt.Errorf("node_spec system_reserved %s %q: %v", name, r, err)
			}
			q.Sub(rq)
		}
		if name == corev1.ResourceMemory {
			q.Sub(evictionHardMemory)
		}
		n.Allocatable[name] = q
	}
	return n, nil
}

// quantityOf reads a Kubernetes quantity, or an Incus size ("24GiB",
// "512MB"), as an incus_instance's cpu and memory are written.
func quantityOf(s string) (resource.Quantity, error) {
	s = strings.TrimSpace(s)
	if strings.HasSuffix(s, "B") {
		s = strings.TrimSuffix(s, "B") // GiB is Gi, MB is M
		if strings.HasSuffix(s, "K") {
			s = strings.TrimSuffix(s, "K") + "k" // KB is k
		}
	}
	return resource.ParseQuantity(s)
}

// expectNode remembers the node the cluster of kubeconfig will have.
func (p *Provider) expectNode(kubeconfig string, n scheduling.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.expected == nil {
		p.expected = map[string]scheduling.Node{}
	}
	p.expected[p.kubeconfigKey(kubeconfig)] = n
}

func (p *Provider) expectedNode(kubeconfig string) (scheduling.Node, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.expected[p.kubeconfigKey(kubeconfig)]
	return n, ok
}

// kubeconfigKey is the file a step's kubeconfig attribute names, as
// clusterOf resolves it.
func (p *Provider) kubeconfigKey(kubeconfig string) string {
	if kubeconfig != "" {
		return p.abs(kubeconfig)
	}
	return p.kubeconfig
}

// nodesFor are the nodes the pods of a step are judged against: the
// cluster's when it answers, else the node a kubernetes_ready step of the
// run said it will have (its machine config's); why says which, for the
// plan. None: nothing is judged.
func (p *Provider) nodesFor(ctx context.Context, cl *cluster, kubeconfig string) (nodes []scheduling.Node, why string) {
	if cl != nil {
		list, err := cl.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) > 0 {
			for _, n := range list.Items {
				nodes = append(nodes, scheduling.Node{Name: n.Name, Labels: n.Labels, Taints: n.Spec.Taints, Allocatable: n.Status.Allocatable, Unschedulable: n.Spec.Unschedulable})
			}
			return nodes, fmt.Sprintf("judged against the cluster's %d node(s)", len(nodes))
		}
	}
	if n, ok := p.expectedNode(kubeconfig); ok {
		return []scheduling.Node{n}, fmt.Sprintf("judged against node %s as its machine config makes it (kubernetes_ready node_spec)", n.Name)
	}
	if cl != nil {
		return nil, "not judged: the cluster has no node yet"
	}
	return nil, "not judged: the cluster does not answer yet and no kubernetes_ready step of this run gives its node_spec"
}

// schedulingPreflight judges the pod templates of docs (manifests of
// subject) against the nodes of their cluster. It returns the plan's
// line and, when some pod template no node accepts, an error that holds
// whatever the values known later (Definite).
func (p *Provider) schedulingPreflight(ctx context.Context, cl *cluster, kubeconfig, subject, defaultNS string, docs []string) (string, phases.Diagnostics) {
	nodes, why := p.nodesFor(ctx, cl, kubeconfig)
	line := "scheduling: " + why
	if len(nodes) == 0 || len(docs) == 0 {
		return line, nil
	}
	findings, err := scheduling.Evaluate([]byte(strings.Join(docs, "\n---\n")), nodes, defaultNS)
	if err != nil {
		return line, phases.Errorf("Scheduling Check Failed", "The pod templates of %s cannot be judged: %v.", subject, err)
	}
	if len(findings) == 0 {
		return line, nil
	}
	d := phases.Errorf("Pods Would Not Schedule", "%s", scheduling.Message(subject, findings))
	d[0].Definite = true
	return line, d
}
