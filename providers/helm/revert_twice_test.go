package helm_test

import (
	"context"
	"testing"

	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/homelab-migrate/migrate/providers/helm"
)

// TestNamespaceRevertRunsTwice: a revert interrupted before its end was
// recorded runs again. A namespace it deleted may still be terminating
// (an object in it holds a finalizer): deleting it again is a conflict for
// the API server, yet the revert is done.
func TestNamespaceRevertRunsTwice(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "twice")
	cfg := obj(map[string]cty.Value{"name": str(ns), "pod_security": str("baseline")})
	a := mustApply(t, p, helm.Namespace, ns, cfg, nil)

	ctx := context.Background()
	cms := k.client.CoreV1().ConfigMaps(ns)
	held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"migrate.test/hold"}}}
	if _, err := cms.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		cms.Patch(context.Background(), "held", types.MergePatchType, patch, metav1.PatchOptions{})
	})
	revert(t, p, helm.Namespace, ns, cfg, a.Revert)
	live, err := k.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || live.DeletionTimestamp == nil {
		t.Fatalf("after the revert the namespace is not terminating: %v %+v", err, live)
	}
	revert(t, p, helm.Namespace, ns, cfg, a.Revert)
}
