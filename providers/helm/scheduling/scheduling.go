package scheduling

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/homelab-migrate/migrate/providers/helm/podsecurity"
)

// Node is a node pods are judged against.
type Node struct {
	Name   string
	Labels map[string]string
	Taints []corev1.Taint
	// Allocatable is what pods may request; resources it does not list
	// are not judged.
	Allocatable   corev1.ResourceList
	Unschedulable bool
}

// Refusal is why one node does not accept a pod.
type Refusal struct {
	Node string
	// Why is the scheduler's reason in words: "untolerated taint
	// node-role.kubernetes.io/control-plane:NoSchedule".
	Why string
	// Taint is the refusing taint, if a taint refuses.
	Taint *corev1.Taint
}

// Finding is a pod template that no node accepts.
type Finding struct {
	// Kind, Namespace and Name identify the object that carries it.
	Kind, Namespace, Name string
	Refusals              []Refusal
}

// Evaluate parses manifests (multi-document YAML, as podsecurity.Evaluate
// reads them) and judges every pod template against nodes. With no nodes
// there is nothing to judge against: no findings.
func Evaluate(manifests []byte, nodes []Node, defaultNamespace string) ([]Finding, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	templates, err := podsecurity.PodTemplates(manifests, defaultNamespace)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, t := range templates {
		if refusals := Judge(t.Meta, t.Spec, nodes); len(refusals) == len(nodes) {
			out = append(out, Finding{Kind: t.Kind, Namespace: t.Namespace, Name: t.Name, Refusals: refusals})
		}
	}
	return out, nil
}

// Judge returns the refusal of each node that does not accept the pod;
// the pod schedules when fewer refusals than nodes come back.
func Judge(meta *metav1.ObjectMeta, spec *corev1.PodSpec, nodes []Node) []Refusal {
	pod := &corev1.Pod{Spec: *spec}
	if meta != nil {
		pod.ObjectMeta = *meta
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	var out []Refusal
	for _, n := range nodes {
		if r, refused := judge(pod, affinity, requests, n); refused {
			out = append(out, r)
		}
	}
	return out
}

func judge(pod *corev1.Pod, affinity nodeaffinity.RequiredNodeAffinity, requests corev1.ResourceList, n Node) (Refusal, bool) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}, Spec: corev1.NodeSpec{Taints: n.Taints, Unschedulable: n.Unschedulable}}
	if n.Unschedulable && !tolerates(pod, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return Refusal{Node: n.Name, Why: "the node is cordoned (unschedulable)"}, true
	}
	blocking := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Taints, pod.Spec.Tolerations, blocking, false); untolerated {
		return Refusal{Node: n.Name, Why: "untolerated taint " + TaintString(t), Taint: &t}, true
	}
	if ok, err := affinity.Match(node); err != nil {
		return Refusal{Node: n.Name, Why: "its node affinity is invalid: " + err.Error()}, true
	} else if !ok {
		return Refusal{Node: n.Name, Why: "its nodeSelector or required node affinity does not match the node's labels (" + labelString(n.Labels) + ")"}, true
	}
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		want := requests[name]
		have, judged := n.Allocatable[name]
		if judged && want.Cmp(have) > 0 {
			return Refusal{Node: n.Name, Why: fmt.Sprintf("insufficient %s: the pod requests %s, the node has %s allocatable", name, quantity(want), quantity(have))}, true
		}
	}
	return Refusal{}, false
}

func tolerates(pod *corev1.Pod, t corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &t, false)
}

// TaintString is a taint as kubectl writes it: KEY[=VALUE]:EFFECT.
func TaintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

func labelString(labels map[string]string) string {
	if len(labels) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ", ")
}

func quantity(q resource.Quantity) string { return q.String() }

// Message explains findings of the objects of subject (a release, a
// manifest step, a Job) and says what to do about each refusal.
func Message(subject string, findings []Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "No node would accept the pods of %s; they would stay Pending until the step's timeout.", subject)
	fixes := map[string]bool{}
	var fixOrder []string
	for _, f := range findings {
		fmt.Fprintf(&b, "\n  %s %s/%s:", f.Kind, f.Namespace, f.Name)
		for _, r := range f.Refusals {
			fmt.Fprintf(&b, "\n    node %s: %s", r.Node, r.Why)
			if fix := fixOf(r); !fixes[fix] {
				fixes[fix] = true
				fixOrder = append(fixOrder, fix)
			}
		}
	}
	for _, fix := range fixOrder {
		b.WriteString("\n" + fix)
	}
	return b.String()
}

// fixOf says what to do about a refusal.
func fixOf(r Refusal) string {
	switch {
	case r.Taint != nil && r.Taint.Key == "node-role.kubernetes.io/control-plane":
		return "Fix: a Talos control plane taints itself " + TaintString(*r.Taint) + " unless its machine config allows workloads on it; for a single-node cluster patch the machine config (talos_machine_config's patches) with\n    cluster:\n      allowSchedulingOnControlPlanes: true\n  or give the pod a toleration {key: " + r.Taint.Key + ", operator: Exists, effect: " + string(r.Taint.Effect) + "}."
	case r.Taint != nil:
		return fmt.Sprintf("Fix: give the pod a toleration {key: %s, operator: Exists, effect: %s}, or remove the taint from the node (on Talos: machine.nodeTaints).", r.Taint.Key, r.Taint.Effect)
	case strings.HasPrefix(r.Why, "insufficient"):
		return "Fix: lower the pod's requests, or give the node more (the VM's cpu and memory)."
	case strings.HasPrefix(r.Why, "its nodeSelector"):
		return "Fix: change the pod's nodeSelector or node affinity, or label the node (on Talos: machine.nodeLabels)."
	case strings.HasPrefix(r.Why, "the node is cordoned"):
		return "Fix: uncordon the node (kubectl uncordon)."
	}
	return "Fix: change the pod's spec so that a node accepts it."
}
