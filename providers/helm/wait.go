package helm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// Waiting on the cluster: kubernetes_manifest's wait_for (conditions and
// phases of its objects, its own CRDs Established) and the loop it shares
// with kubernetes_ready (poll).

var crdResource = k8sschema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// waitEstablished waits (up to a minute) until a CRD the step just
// applied is Established, then reads discovery again.
func waitEstablished(ctx context.Context, c *call, cl *cluster, dyn dynamic.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		state := ""
		if err != nil {
			state = err.Error()
		} else if state = condState(crd.Object, "Established"); state == "" {
			if r, ok := cl.mapper.(meta.ResettableRESTMapper); ok {
				r.Reset()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("it is not Established: %s", state)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// noStatus are kinds wait_for does not wait on: they report no condition.
var noStatus = map[string]bool{
	"ConfigMap": true, "Secret": true, "ServiceAccount": true, "Role": true, "RoleBinding": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Service": true, "Namespace": true,
	"NetworkPolicy": true, "Ingress": true, "IngressClass": true, "StorageClass": true,
	"PriorityClass": true, "LimitRange": true, "ResourceQuota": true, "Endpoints": true,
	"EndpointSlice": true, "PodDisruptionBudget": true,
}

// conditionsOf are the conditions (or, for a PVC, the phases) the built-in
// kinds report: a wait_for one of them never reports waits out its
// timeout, so the plan refuses it.
var conditionsOf = map[string][]string{
	"Deployment":            {"Available", "Progressing", "ReplicaFailure"},
	"ReplicaSet":            {"ReplicaFailure"},
	"StatefulSet":           {},
	"DaemonSet":             {},
	"Job":                   {"Complete", "Failed", "Suspended", "SuccessCriteriaMet", "FailureTarget"},
	"Pod":                   {"Ready", "PodScheduled", "Initialized", "ContainersReady", "PodReadyToStartContainers"},
	"PersistentVolumeClaim": {"Bound", "Pending", "Lost", "Resizing", "FileSystemResizePending"},
	"PersistentVolume":      {"Available", "Bound", "Released", "Failed"},
}

// checkWaitFor refuses a wait_for that a built-in kind of the step never
// reports (a Job waited on for "Available"), naming the kind's own.
func checkWaitFor(c *call, a manAttrs, objs []*manObj) phases.Diagnostics {
	if a.WaitFor == "" {
		return nil
	}
	for _, o := range objs {
		known, ok := conditionsOf[o.u.GetKind()]
		if !ok || slices.Contains(known, a.WaitFor) {
			continue
		}
		has := "no condition migrate can wait for"
		if len(known) > 0 {
			has = "only " + strings.Join(known, ", ")
		}
		return phases.Errorf("Invalid Wait Condition", "%s waits for %q on every object, but %s %s never reports it (it has %s). Put objects that report different conditions in steps of their own, each with its own wait_for.", c.Addr, a.WaitFor, o.u.GetKind(), o.u.GetName(), has)
	}
	return nil
}

// waitObjects waits until every object with a status has the condition
// wait_for (type=True), or the phase of that name (a PVC's Bound). A
// gentle stop (c.Stop) ends the wait at once: stopped, the objects
// applied, the wait not done.
func waitObjects(ctx context.Context, c *call, cl *cluster, dyn dynamic.Interface, a manAttrs, objs []*manObj) (_ phases.Diagnostics, stopped bool) {
	limit, _ := time.ParseDuration(a.WaitTimeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, o := range objs {
		if noStatus[o.u.GetKind()] || o.u.GetKind() == "CustomResourceDefinition" && a.WaitFor != "Established" {
			continue
		}
		ri := resourceOf(dyn, o.gvr, o.u.GetNamespace())
		last, end, diags := poll(parent, ctx, c.Stop, every(time.Second), func(ctx context.Context, _ bool) (string, phases.Diagnostics) {
			live, err := ri.Get(ctx, o.u.GetName(), metav1.GetOptions{})
			if err != nil {
				return err.Error(), nil
			}
			state := condState(live.Object, a.WaitFor)
			if why := failed(live.Object); state != "" && why != "" && a.WaitFor != "Failed" {
				return state, phases.Errorf("Object Failed", "%s: %s failed instead of becoming %s: %s.", c.Addr, o.id(), a.WaitFor, why)
			}
			return state, nil
		}, func(state string) { c.Log.Printf("waiting for %s to be %s: %s", o.id(), a.WaitFor, state) })
		switch end {
		case waitDone:
			c.Log.Printf("%s is %s", o.id(), a.WaitFor)
		case waitFailed:
			return diags, false
		case waitStopped:
			c.Log.Printf("stopped waiting for %s to be %s: %s", o.id(), a.WaitFor, last)
			return sdk.StoppedWaiting(c.Addr, fmt.Sprintf("its %d object(s) are applied", len(objs)),
				fmt.Sprintf("%s becoming %s (wait_for; last seen: %s)", o.id(), a.WaitFor, last)), true
		case waitInterrupted:
			return sdk.Interrupted(c.Addr, parent.Err()), false
		case waitTimedOut:
			return phases.Errorf("Wait Timed Out", "%s: %s did not become %s within wait_timeout (%s): %s. Its objects are applied; run again to wait again, or raise wait_timeout.", c.Addr, o.id(), a.WaitFor, a.WaitTimeout, last), false
		}
	}
	return nil, false
}

// waitEnd is how a poll ended.
type waitEnd int

const (
	waitDone        waitEnd = iota // check said done
	waitFailed                     // check failed: waiting longer would not help
	waitStopped                    // stop closed (a gentle stop)
	waitInterrupted                // parent was cancelled
	waitTimedOut                   // ctx ended: the wait's own timeout, or the run's deadline
)

// poll is the wait of kubernetes_manifest's wait_for, of
// kubernetes_ready and of a release: it calls check at the intervals of
// asks, until check says done ("") or fails, stop closes, or ctx (parent
// with the wait's timeout) ends. check gets ctx for its requests, and
// first on the first call. Each new state is passed to waiting and is
// last; a state seen after ctx ended (a request cut by the deadline) says
// nothing new and is not kept.
func poll(parent, ctx context.Context, stop <-chan struct{}, asks interval, check func(ctx context.Context, first bool) (string, phases.Diagnostics), waiting func(state string)) (last string, _ waitEnd, _ phases.Diagnostics) {
	wait := asks.first
	for first := true; ; first = false {
		state, diags := check(ctx, first)
		switch {
		case diags.HasErrors():
			return last, waitFailed, diags
		case state == "":
			return last, waitDone, nil
		}
		if ctx.Err() == nil || last == "" {
			if state != last {
				waiting(state)
			}
			last = state
		}
		select {
		case <-stop:
			return last, waitStopped, nil
		case <-ctx.Done():
			if errors.Is(parent.Err(), context.Canceled) {
				return last, waitInterrupted, nil
			}
			return last, waitTimedOut, nil
		case <-time.After(wait):
		}
		wait = asks.after(wait)
	}
}

// interval is how often a poll asks again: first, then a quarter longer
// each time up to most. A workload ready in half a second is seen then,
// not a whole interval later (its service's downtime includes the lag),
// while a slow one is asked at most every most: the lag stays within
// about a third of the time waited so far.
type interval struct{ first, most time.Duration }

// every is a constant interval.
func every(d time.Duration) interval { return interval{d, d} }

func (i interval) after(d time.Duration) time.Duration {
	return min(i.most, d+d/4)
}

// condState is "" when obj has the condition cond=True or is in the
// phase cond, else what it shows instead.
func condState(obj map[string]any, cond string) string {
	phase, _, _ := unstructured.NestedString(obj, "status", "phase")
	if phase == cond {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	var seen []string
	for _, x := range conds {
		m, _ := x.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		if typ == cond && status == "True" {
			return ""
		}
		s := typ + "=" + status
		if r, _ := m["reason"].(string); r != "" {
			s += " (" + r + ")"
		}
		seen = append(seen, s)
	}
	var parts []string
	if phase != "" {
		parts = append(parts, "status.phase is "+phase)
	}
	if len(seen) > 0 {
		parts = append(parts, "conditions "+strings.Join(seen, ", "))
	}
	if len(parts) == 0 {
		return "no status yet"
	}
	return strings.Join(parts, "; ")
}

// failed is the reason and message of a Failed=True condition (a Job's),
// else "": waiting longer would not help.
func failed(obj map[string]any) string {
	conds, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Failed" && m["status"] == "True" {
			reason, _ := m["reason"].(string)
			msg, _ := m["message"].(string)
			return strings.Trim(reason+": "+clipText(msg), ": ")
		}
	}
	return ""
}
