package helm_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
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
	contains(t, "the log", log.String(), "beginning wait", "revision 1 deployed")
	d, err := k.client.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || d.Status.ReadyReplicas != 1 {
		t.Errorf("after the wait the Deployment has %d ready replicas (%v), want 1", d.Status.ReadyReplicas, err)
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
	contains(t, "the error", err.Error(), "Release "+ns+"/web: context deadline exceeded", "Last seen while waiting: Deployment is not ready: "+ns+"/web. 0 out of 1 expected pods are ready")
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
