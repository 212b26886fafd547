package talosvm_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/lab/talosvm"
)

// TestEtcdRecoveredFromSnapshot: the VM's real etcd is snapshotted
// through the Talos API, lost, and recovered from that snapshot by
// EtcdRecover and Bootstrap with recover_etcd (talosctl bootstrap
// --recover-from): an object made before the snapshot is back, one made
// after it is not.
func TestEtcdRecoveredFromSnapshot(t *testing.T) {
	t.Parallel()

	vm := boot(t, talosvm.Spec{Name: "talos-vm"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	c := install(t, ctx, vm, i915Image, homelabPatch(t))
	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	k := kubeUp(t, ctx, c, vm)
	configMap(t, ctx, k, "before")

	snap := etcdSnapshot(t, ctx, c)
	if len(snap)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes carries no SHA-256 trailer", len(snap))
	}

	if sum := sha256.Sum256(snap[:len(snap)-sha256.Size]); !bytes.Equal(sum[:], snap[len(snap)-sha256.Size:]) {
		t.Fatal("the snapshot's trailer is not its SHA-256")
	}

	configMap(t, ctx, k, "after")

	if err := vm.Node().LoseEtcd(); err != nil {
		t.Fatal(err)
	}

	if _, err := c.EtcdRecover(ctx, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}

	k = kubeUp(t, ctx, c, vm)

	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap made before the snapshot: %v", err)
	}

	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap made after the snapshot: %v, want not found", err)
	}
}

// kubeUp waits for etcd and the node's Kubernetes, and returns a client.
func kubeUp(t *testing.T, ctx context.Context, c *client.Client, vm *talosvm.VM) *kubernetes.Clientset {
	t.Helper()

	if err := vm.WaitKubernetes(ctx); err != nil {
		t.Fatal(err)
	}

	kc, err := c.Kubeconfig(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}

	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	return k
}

func configMap(t *testing.T, ctx context.Context, k *kubernetes.Clientset, name string) {
	t.Helper()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": name}}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func etcdSnapshot(t *testing.T, ctx context.Context, c *client.Client) []byte {
	t.Helper()

	rd, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close() //nolint:errcheck

	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}

	return b
}
