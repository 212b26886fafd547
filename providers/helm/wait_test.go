package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// The lab's node is kwok's: a Deployment's pods are scheduled and become
// Ready, so Helm's wait is tested for real.

func waitRelease(k *kube, ns string, timeout string, values map[string]cty.Value) cty.Value {
	attrs := map[string]cty.Value{"name": str("web"), "chart": str("charts/wait"), "namespace": str(ns), "wait": cty.True, "timeout": str(timeout)}
	if values != nil {
		attrs["values"] = obj(values)
	}
	return obj(attrs)
}

// TestReleaseWaitReady: with wait = true the install returns once the
// Deployment's pod is Ready on the node.
func TestReleaseWaitReady(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "wait")
	var log bytes.Buffer
	a := apply(t, p, helm.Release, "web", waitRelease(k, ns, "5m", nil), nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\nlog:\n%s", err, log.String())
	}
	contains(t, "the log", log.String(), "waiting up to 5m for the 1 object(s) of release "+ns+"/web", "every object is ready", "revision 1 deployed")
	// Helm's wait counts the ReplicaSet's ready pods; the Deployment's
	// own status catches up a moment later, so the pods are what it
	// proves ready.
	pods, err := k.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readyPods := 0
	for _, pod := range pods.Items {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				readyPods++
			}
		}
	}
	if readyPods != 1 {
		t.Errorf("after the wait %d of the release's %d pods are Ready, want 1", readyPods, len(pods.Items))
	}
	if got := k.history(t, ns, "web"); got != "1:deployed" {
		t.Errorf("history %q", got)
	}
}

// TestReleaseWaitNeverReady: pods that no node accepts fail the step
// once its timeout is over, with Helm's message and what it saw last.
func TestReleaseWaitNeverReady(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "nowait")
	cfg := waitRelease(k, ns, "20s", map[string]cty.Value{"nodeSelector": obj(map[string]cty.Value{"migrate.test/nowhere": str("true")})})
	start := time.Now()
	var log bytes.Buffer
	a := apply(t, p, helm.Release, "web", cfg, nil, &log)
	took := time.Since(start)
	err := a.Diagnostics.Err()
	if err == nil {
		t.Fatalf("a release whose pods cannot be scheduled became ready; log:\n%s", log.String())
	}
	contains(t, "the error", err.Error(), "release "+ns+"/web was not ready within its timeout (20s)",
		"Not ready: Deployment "+ns+"/web (Deployment is not ready: "+ns+"/web. 0 out of 1 expected pods are ready)",
		"Pod "+ns+"/web-", "is Pending (Unschedulable: ")
	if took < 20*time.Second || took > 20*time.Second+time.Minute {
		t.Errorf("the step failed after %v, want its timeout of 20s (and a little)", took)
	}
	if got := k.history(t, ns, "web"); got != "1:failed" {
		t.Errorf("history %q", got)
	}
	if a.Revert == nil {
		t.Error("the failed install returned no revert data")
	}
}

// TestReadyKwokNode: kubernetes_ready sees the lab's node Ready, as kwok
// reports it with its heartbeats.
func TestReadyKwokNode(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	mustApply(t, p, helm.Ready, "node", obj(map[string]cty.Value{"node": str("talos-lab"), "timeout": str("2m")}), nil)
}

// TestReleaseWaitsByDefault: without wait, a release whose pod never runs
// fails once its timeout is over; wait = false returns at once, deployed.
func TestReleaseWaitsByDefault(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "waitdef")
	nowhere := obj(map[string]cty.Value{"nodeSelector": obj(map[string]cty.Value{"migrate.test/nowhere": str("true")})})
	cfg := func(name string, extra map[string]cty.Value) cty.Value {
		attrs := map[string]cty.Value{"name": str(name), "chart": str("charts/wait"), "namespace": str(ns), "timeout": str("5s"), "values": nowhere}
		for k, v := range extra {
			attrs[k] = v
		}
		return obj(attrs)
	}
	none := obj(map[string]cty.Value{"name": str("none"), "chart": str("charts/wait"), "namespace": str(ns), "values": obj(map[string]cty.Value{"replicas": cty.NumberIntVal(0)})})
	contains(t, "the plan", mustPlan(t, p, helm.Release, "none", none).Diff, "apply waits up to 5m for its Deployments, StatefulSets and DaemonSets Ready, claims Bound; a crash-looping pod fails it at once")
	var log bytes.Buffer
	if a := apply(t, p, helm.Release, "web", cfg("web", nil), nil, &log); !a.Diagnostics.HasErrors() {
		t.Fatalf("a release whose pod never runs was done without waiting; log:\n%s", log.String())
	}
	if got := k.history(t, ns, "web"); got != "1:failed" {
		t.Errorf("history after the wait failed: %q, want 1:failed", got)
	}

	off := cfg("nowait", map[string]cty.Value{"wait": cty.False, "timeout": str("5m")})
	contains(t, "the plan", mustPlan(t, p, helm.Release, "none", obj(map[string]cty.Value{"name": str("none"), "chart": str("charts/wait"), "namespace": str(ns), "wait": cty.False})).Diff,
		"wait = false: apply does not wait")
	start := time.Now()
	a := mustApply(t, p, helm.Release, "nowait", off, nil)
	if took := time.Since(start); took > time.Minute {
		t.Errorf("wait = false took %s", took)
	}
	if got := a.Outputs.GetAttr("status").AsString(); got != "deployed" {
		t.Errorf("status %s, want deployed", got)
	}
}

// crashLoop makes the first pod of the release's Deployment look as a
// kubelet reports a container that keeps crashing: waiting in
// CrashLoopBackOff, restarted 4 times, its last run ended with exit code
// 1 (the tests' API server has no kubelet; the pod has no node, so kwok
// leaves its status alone).
func crashLoop(t *testing.T, k *kube, ns string) {
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute)
	for !func() bool {
		pods, err := k.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false
		}
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodRunning {
				continue // an older revision's
			}
			pod.Status.Phase = corev1.PodRunning
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: "app", Image: "registry.local/app:1.0", RestartCount: 4,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 1m20s restarting failed container=app"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}},
			}}
			_, err := k.client.CoreV1().Pods(ns).UpdateStatus(ctx, &pod, metav1.UpdateOptions{})
			return err == nil
		}
		return false
	}() {
		if time.Now().After(deadline) {
			t.Errorf("no pod of %s to make crash-loop", ns)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReleaseCrashLoopFailsEarly: a pod that crash-loops fails the wait
// at once, not after its 10 minutes, naming the pod, its container,
// restarts, last exit and its previous run's last log lines, a secret
// in them redacted; the revision is marked failed, and the step's revert
// brings back the revision before (an upgrade) or uninstalls (an install).
func TestReleaseCrashLoopFailsEarly(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.madeNamespace(t, "crash")
	const canary = "pw-crashloop-7f3a91"
	helm.ServeLogs(ns, func(pod, container string, previous bool) ([]byte, error) {
		if !previous {
			return []byte("starting\n"), nil
		}
		var b strings.Builder
		for i := range 30 {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		b.WriteString("connecting to the database with password " + canary + "\n")
		b.WriteString("FATAL: the database is newer than this server (10.11.0 > 10.10.3)\n")
		return []byte(b.String()), nil
	})
	cfg := func(replicas int64) cty.Value {
		return obj(map[string]cty.Value{"name": str("web"), "chart": str("charts/wait"), "namespace": str(ns), "timeout": str("10m"),
			"set_sensitive": strMap(map[string]string{"password": canary}),
			"values": obj(map[string]cty.Value{"replicas": cty.NumberIntVal(replicas),
				"nodeSelector": obj(map[string]cty.Value{"migrate.test/nowhere": str("true")})})})
	}
	mustApply(t, p, helm.Release, "web", cfg(0), nil) // revision 1 (as made by an earlier run): no pod, ready at once

	go crashLoop(t, k, ns)
	start := time.Now()
	var log bytes.Buffer
	a := apply(t, p, helm.Release, "web", cfg(1), nil, &log)
	took := time.Since(start)
	err := a.Diagnostics.Err()
	if err == nil {
		t.Fatalf("a release whose pod crash-loops was done; log:\n%s", log.String())
	}
	if took > 3*time.Minute {
		t.Errorf("the crash loop was told after %s, not at once (timeout 10m)", took)
	}
	contains(t, "the error", err.Error(), "Release Pod Failing", "pod "+ns+"/web-", "container app: CrashLoopBackOff, 4 restart(s)",
		"back-off 1m20s", "its last run ended: Error, exit code 1", "The last 20 line(s) of its log (the run that ended)",
		"FATAL: the database is newer than this server (10.11.0 > 10.10.3)", "rollback returns to the previous revision")
	if strings.Contains(err.Error(), "line 11\n") {
		t.Errorf("more than the last 20 lines are shown:\n%s", err)
	}
	for _, s := range []string{err.Error(), log.String()} {
		if strings.Contains(s, canary) {
			t.Errorf("the password shows in clear:\n%s", s)
		}
	}
	contains(t, "the log", log.String(), "CrashLoopBackOff")
	if got := k.history(t, ns, "web"); got != "1:superseded 2:failed" {
		t.Errorf("history after the crash loop: %q, want 1:superseded 2:failed", got)
	}
	if a.Revert == nil {
		t.Fatal("the failed upgrade returned no revert data")
	}
	revert(t, p, helm.Release, "web", cfg(1), a.Revert)
	if got := k.history(t, ns, "web"); !strings.HasSuffix(got, "3:deployed") {
		t.Errorf("history after the revert: %q, want revision 1 back as 3:deployed", got)
	}
	if d, err := k.client.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 0 {
		t.Errorf("after the revert the Deployment is not revision 1's (0 replicas): %v", err)
	}
}
