package helm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/helm/scheduling"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// readyAttrs are the attributes of a kubernetes_ready step (a check, or a
// step after the bootstrap).
type readyAttrs struct {
	Node         string        `cty:"node" doc:"The node to wait for; default every node (at least one must be registered)."`
	Timeout      string        `cty:"timeout" doc:"How long to wait, \"5m\" by default."`
	Kubeconfig   string        `cty:"kubeconfig" doc:"Path to a kubeconfig for this step, relative to the runbook (such as talos_kubeconfig.admin.path); default the provider's."`
	NodeSpec     nodeSpecAttrs `cty:"node_spec" doc:"The node the cluster will have, as its machine config makes it: talos_machine_config's node output (name, labels, taints, system_reserved), known at plan. Until the cluster answers, the plan judges every pod template of the later steps on this kubeconfig against it (taints, nodeSelector and affinity, requests); apply checks that the node registered carries no NoSchedule or NoExecute taint it did not say."`
	NodeCapacity capacityAttrs `cty:"node_capacity" doc:"What the node's machine has: cpu (cores) and memory (\"24GiB\", as incus_instance takes it); with node_spec's system_reserved and kubelet's hard eviction, its allocatable resources."`
}

// Ready is the kubernetes_ready step type.
const Ready = "kubernetes_ready"

const (
	readyTimeout = 5 * time.Minute
	// readyPoll is how often the cluster is asked again; each probe has
	// readyProbe to answer, so a hung API server is a state, not a hang.
	readyPoll  = time.Second
	readyProbe = 10 * time.Second
)

var readyStep = &sdk.StepType[*Provider, readyAttrs, struct{}, struct{}]{
	Name:        Ready,
	Description: "Waits until the cluster's API server answers /readyz and every node (or the one named) has the condition Ready=True; fails after timeout with the last state seen. Changes nothing.",
	Rollback:    "Nothing to undo.",
	CanCheck:    true,
	WaitsOnly:   true,
	Validate:    validateReady,
	Unknowns:    true, // node_spec may be known only once the machine config is rendered
	// Plan does not contact the cluster: right after a bootstrap its
	// kubeconfig may not be written yet.
	Plan: func(_ context.Context, c *call, a readyAttrs, _ *sdk.Prior[struct{}, struct{}]) sdk.Plan[struct{}] {
		diff := fmt.Sprintf("wait up to %s until the API server answers /readyz and %s Ready", orDefault(a.Timeout, "5m"), readyWhat(a))
		if c.Unknown("kubeconfig") || c.Unknown("node") || c.Unknown("timeout") {
			return sdk.Plan[struct{}]{Diff: diff + " (" + sdk.UnknownText + ": its kubeconfig or node)"}
		}
		line, diags := c.Settings.rememberNode(c, a)
		if line != "" {
			diff += "\n" + line
		}
		return sdk.Plan[struct{}]{Diff: diff, Diagnostics: diags}
	},
	Apply: applyReady,
}

func readyWhat(a readyAttrs) string {
	if a.Node != "" {
		return fmt.Sprintf("node %s is", a.Node)
	}
	return "every node is"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func validateReady(c *call, a *readyAttrs) phases.Diagnostics {
	if a.Timeout == "" || c.Unknown("timeout") {
		return nil
	}
	if d, err := time.ParseDuration(a.Timeout); err != nil || d <= 0 {
		return phases.Errorf("Invalid Timeout", "timeout of %s must be a positive duration such as \"5m\", not %q.", c.Addr, a.Timeout)
	}
	return nil
}

func applyReady(ctx context.Context, c *call, a readyAttrs, _ struct{}, _ *sdk.Prior[struct{}, struct{}]) sdk.Apply[struct{}, struct{}] {
	cl, diags := c.Settings.clusterOf(c, a.Kubeconfig)
	if diags.HasErrors() {
		return sdk.Apply[struct{}, struct{}]{Diagnostics: diags}
	}
	if _, d := c.Settings.rememberNode(c, a); d.HasErrors() {
		return sdk.Apply[struct{}, struct{}]{Diagnostics: d}
	}
	timeout := readyTimeout
	if a.Timeout != "" {
		timeout, _ = time.ParseDuration(a.Timeout)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline() // the run's own deadline may come first
	waited := time.Until(deadline).Round(time.Second)
	prev := ""
	last, end, _ := poll(parent, ctx, nil, every(readyPoll), func(ctx context.Context, first bool) (string, phases.Diagnostics) {
		// The first probe gets its full readyProbe whatever the timeout:
		// on a loaded machine a short timeout can pass before one request
		// was even sent, and the answer would then say nothing about the
		// cluster.
		probe := ctx
		if first {
			probe = parent
		}
		state := readyState(probe, cl, a.Node)
		if !first && time.Until(deadline) < readyPoll/10 {
			// Cut short by (or refused for) the deadline, e.g. by the
			// client's rate limiter, which refuses a wait it cannot
			// finish in time: no news about the cluster.
			state = prev
		}
		prev = state
		return state, nil
	}, func(state string) { c.Log.Printf("waiting: %s", state) })
	switch end {
	case waitInterrupted:
		return sdk.Apply[struct{}, struct{}]{Diagnostics: sdk.Interrupted(c.Addr, parent.Err())}
	case waitTimedOut:
		return sdk.Apply[struct{}, struct{}]{Diagnostics: phases.Errorf("Kubernetes Not Ready", "%s: the cluster was not ready after waiting %s: %s.", c.Addr, waited, last)}
	}
	c.Log.Printf("the API server is ready and %s Ready", readyWhat(a))
	if d := unexpectedTaints(parent, c, cl, a); d.HasErrors() {
		return sdk.Apply[struct{}, struct{}]{Diagnostics: d}
	}
	return sdk.Apply[struct{}, struct{}]{Revert: &sdk.RevertData[struct{}]{Description: "nothing to undo: a check"}}
}

// readyState asks the cluster once; "" means ready, else what is not.
func readyState(ctx context.Context, cl *cluster, node string) string {
	ctx, cancel := context.WithTimeout(ctx, readyProbe)
	defer cancel()
	body, err := cl.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		if len(body) > 0 {
			return fmt.Sprintf("the API server is not ready (/readyz: %s)", strings.TrimSpace(clipText(string(body))))
		}
		return fmt.Sprintf("the API server does not answer /readyz: %v", err)
	}
	var nodes []corev1.Node
	if node != "" {
		n, err := cl.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Sprintf("node %s is not registered", node)
		case err != nil:
			return fmt.Sprintf("node %s cannot be read: %v", node, err)
		}
		nodes = []corev1.Node{*n}
	} else {
		list, err := cl.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Sprintf("the nodes cannot be listed: %v", err)
		}
		if len(list.Items) == 0 {
			return "no node is registered"
		}
		nodes = list.Items
	}
	var bad []string
	for _, n := range nodes {
		if s := nodeReady(n); s != "" {
			bad = append(bad, s)
		}
	}
	slices.Sort(bad)
	return strings.Join(bad, "; ")
}

// nodeReady is "" for a node whose Ready condition is True, else its state.
func nodeReady(n corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return ""
		}
		s := fmt.Sprintf("node %s: Ready=%s", n.Name, c.Status)
		var why []string
		for _, w := range []string{c.Reason, clipText(c.Message)} {
			if w != "" {
				why = append(why, w)
			}
		}
		if len(why) > 0 {
			s += " (" + strings.Join(why, ": ") + ")"
		}
		return s
	}
	return fmt.Sprintf("node %s: no Ready condition yet", n.Name)
}

func clipText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// rememberNode keeps the node a step's node_spec says its cluster will
// have, for the scheduling preflight of later steps; the line says so in
// the plan.
func (p *Provider) rememberNode(c *call, a readyAttrs) (string, phases.Diagnostics) {
	if c.Null("node_spec") || c.Unknown("node_spec") || c.Unknown("node_capacity") {
		return "", nil
	}
	spec := a.NodeSpec
	if spec.Name == "" {
		spec.Name = a.Node
	}
	var capacity *capacityAttrs
	if !c.Null("node_capacity") {
		capacity = &a.NodeCapacity
	}
	n, err := expectedNode(spec, capacity)
	if err != nil {
		return "", phases.Errorf("Invalid Attribute Value", "%s: %v.", c.Addr, err)
	}
	p.expectNode(a.Kubeconfig, n)
	var taints []string
	for _, t := range n.Taints {
		taints = append(taints, scheduling.TaintString(t))
	}
	line := fmt.Sprintf("node %s as its machine config makes it: taints %s", n.Name, orDefault(strings.Join(taints, ", "), "none"))
	if cpu, ok := n.Allocatable[corev1.ResourceCPU]; ok {
		line += ", allocatable cpu " + cpu.String()
	}
	if mem, ok := n.Allocatable[corev1.ResourceMemory]; ok {
		line += ", memory " + mem.String()
	}
	return line + " (the pods of later steps are judged against it until the cluster answers)", nil
}

// unexpectedTaints fails when the node registered carries a taint that
// keeps pods off and that node_spec did not say: the plan judged the
// pods against another node than the one there.
func unexpectedTaints(ctx context.Context, c *call, cl *cluster, a readyAttrs) phases.Diagnostics {
	if c.Null("node_spec") || a.Node == "" && a.NodeSpec.Name == "" {
		return nil
	}
	name := orDefault(a.NodeSpec.Name, a.Node)
	ctx, cancel := context.WithTimeout(ctx, readyProbe)
	defer cancel()
	n, err := cl.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil // readyState saw it; a read failing now says nothing of its taints
	}
	said := map[string]bool{}
	for _, t := range a.NodeSpec.Taints {
		said[scheduling.TaintString(corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})] = true
	}
	var extra []string
	for _, t := range n.Spec.Taints {
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !said[scheduling.TaintString(t)] &&
			!strings.HasPrefix(t.Key, "node.kubernetes.io/") { // the node lifecycle's own (not-ready, unschedulable...)
			extra = append(extra, scheduling.TaintString(t))
		}
	}
	if len(extra) > 0 {
		return phases.Errorf("Node Not As Planned", "%s: node %s carries the taint(s) %s, which its node_spec did not say: the plan judged the pods of the later steps against a node without them. Make a new plan (migrate plan) to judge them against the node as it is.", c.Addr, name, strings.Join(extra, ", "))
	}
	return nil
}
