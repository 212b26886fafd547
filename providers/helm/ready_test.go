package helm_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// node registers a Node object (no kubelet runs in the lab: the test plays
// its part), deleted when the test ends.
func (k *kube) node(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("t-%s-%06d", prefix, rand.IntN(1000000))
	if _, err := k.client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup of node %s: %v", name, err)
		}
	})
	return name
}

// setReady sets the node's Ready condition through the status
// subresource, as a kubelet reports it.
func (k *kube) setReady(t testing.TB, name string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	ctx := context.Background()
	// The controller manager's node controllers write the node too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
			Message: "set by the test", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesReady: the check names what it waits for in the plan;
// it fails after its timeout naming the last state seen (a node not
// registered, a node NotReady, in the every-node form too); it waits
// while the node is NotReady and succeeds once the node reports Ready.
func TestKubernetesReady(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	name := fmt.Sprintf("t-ready-%06d", rand.IntN(1000000))
	cfg := func(m map[string]cty.Value) cty.Value { return obj(m) }

	contains(t, "the plan", mustPlan(t, p, helm.Ready, "api", cfg(map[string]cty.Value{})).Diff, "wait up to 5m", "/readyz", "every node is Ready")
	contains(t, "the plan of one node", mustPlan(t, p, helm.Ready, "api", cfg(map[string]cty.Value{"node": str(name), "timeout": str("90s")})).Diff, "wait up to 90s", "node "+name+" is Ready")
	if d := plan(t, p, helm.Ready, "api", cfg(map[string]cty.Value{"timeout": str("soon")})).Diagnostics; !d.HasErrors() || !strings.Contains(d.Err().Error(), `not "soon"`) {
		t.Errorf("an invalid timeout: %v", d.Err())
	}

	r := apply(t, p, helm.Ready, "api", cfg(map[string]cty.Value{"node": str(name), "timeout": str("1s")}), nil, nil)
	if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "Kubernetes Not Ready") || !strings.Contains(err.Error(), "node "+name+" is not registered") {
		t.Fatalf("a node not registered: %v", err)
	}

	name = k.node(t, "ready")
	k.setReady(t, name, corev1.ConditionFalse, "KubeletNotReady")
	one := cfg(map[string]cty.Value{"node": str(name), "timeout": str("1s")})
	if err := apply(t, p, helm.Ready, "api", one, nil, nil).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "node "+name+": Ready=False (KubeletNotReady: set by the test)") {
		t.Fatalf("a node NotReady: %v", err)
	}
	// Every node: ours is not Ready, so neither is the cluster.
	if err := apply(t, p, helm.Ready, "api", cfg(map[string]cty.Value{"timeout": str("1s")}), nil, nil).Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "node "+name+": Ready=False") {
		t.Fatalf("every node, one NotReady: %v", err)
	}

	// It waits: the node turns Ready while the step polls.
	var log providertest.SyncBuffer
	done := make(chan providers.ApplyResponse, 1)
	go func() {
		done <- p.Apply(context.Background(), providers.ApplyRequest{Type: helm.Ready, Addr: addr(helm.Ready, "api"),
			Config: cfg(map[string]cty.Value{"node": str(name), "timeout": str("60s")}), Log: &log})
	}()
	for !strings.Contains(log.String(), "waiting: node "+name+": Ready=False") {
		select {
		case r := <-done:
			t.Fatalf("the step returned before the node was Ready: %v\n%s", r.Diagnostics.Err(), log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	k.setReady(t, name, corev1.ConditionTrue, "KubeletReady")
	r = <-done
	if err := r.Diagnostics.Err(); err != nil || r.Revert == nil {
		t.Fatalf("after the node turned Ready: %v (revertOf %v)\n%s", err, r.Revert, log.String())
	}
	contains(t, "the log", log.String(), "the API server is ready and node "+name+" is Ready")
}
