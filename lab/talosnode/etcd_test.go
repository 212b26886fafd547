package talosnode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// bootstrapped starts a node and bootstraps it, waiting until etcd runs.
func bootstrapped(t *testing.T) (*talosnode.Node, *client.Client, context.Context) {
	t.Helper()

	n := startNode(t, talosnode.Options{EtcdStartup: -1})
	c, ctx := connect(t, n)

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "etcd running", func() bool { return service(t, ctx, c, "etcd").State == "Running" })

	return n, c, ctx
}

func snapshot(t *testing.T, ctx context.Context, c *client.Client) []byte {
	t.Helper()

	b, err := readSnapshot(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// readSnapshot reads a whole EtcdSnapshot stream: a node's error may come
// at the call or in the stream.
func readSnapshot(ctx context.Context, c *client.Client) ([]byte, error) {
	rd, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nil, err
	}
	defer rd.Close() //nolint:errcheck

	return io.ReadAll(rd)
}

// TestEtcdSnapshotAndRecover: the node streams a snapshot carrying its
// SHA-256 (size % 512 == 32, as talosctl etcd snapshot checks); after its
// etcd is lost, EtcdRecover uploads the snapshot and Bootstrap with
// recover_etcd brings the data back, as talosctl bootstrap --recover-from.
func TestEtcdSnapshotAndRecover(t *testing.T) {
	n, c, ctx := bootstrapped(t)

	if err := n.PutEtcd("/registry/configmaps/default/before", "1"); err != nil {
		t.Fatal(err)
	}

	snap := snapshot(t, ctx, c)
	if len(snap)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes carries no SHA-256 trailer", len(snap))
	}

	if sum := sha256.Sum256(snap[:len(snap)-sha256.Size]); !bytes.Equal(sum[:], snap[len(snap)-sha256.Size:]) {
		t.Fatal("the snapshot's trailer is not its SHA-256")
	}

	if err := n.LoseEtcd(); err != nil {
		t.Fatal(err)
	}

	if etcd := service(t, ctx, c, "etcd"); etcd.State != "Preparing" {
		t.Fatalf("etcd after it was lost: %v", etcd)
	}

	if _, err := readSnapshot(ctx, c); err == nil || !strings.Contains(err.Error(), "etcd is not running") {
		t.Fatalf("a node whose etcd is lost answered a snapshot: %v", err)
	}

	// Without an upload, recover_etcd has nothing to recover from.
	err := c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, err, codes.FailedPrecondition, "error verifying snapshot")

	// A damaged snapshot is refused by its hash, unless told to skip it.
	bad := bytes.Clone(snap)
	bad[10] ^= 0xff

	if _, err := c.EtcdRecover(ctx, bytes.NewReader(bad)); err != nil {
		t.Fatal(err)
	}

	err = c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, err, codes.FailedPrecondition, "sha256 does not match")

	if _, err := c.EtcdRecover(ctx, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}

	eventually(t, 30*time.Second, "etcd running after the recovery", func() bool { return service(t, ctx, c, "etcd").State == "Running" })

	if !n.EtcdHas("/registry/configmaps/default/before", "1") {
		t.Error("the key written before the snapshot is not back")
	}

	if !bytes.Equal(snapshot(t, ctx, c), snap) {
		t.Error("the recovered etcd's snapshot differs from the one it was recovered from")
	}
}
