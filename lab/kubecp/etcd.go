package kubecp

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdSnapshot streams a snapshot of the node's etcd as its Maintenance
// API gives it (what Talos' EtcdSnapshot RPC streams): the bbolt database
// followed by its SHA-256. The caller closes the reader.
func (c *ControlPlane) EtcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	return EtcdSnapshot(ctx, c.cfg.Addr)
}

// EtcdSnapshot streams a snapshot of the etcd on addr.
func EtcdSnapshot(ctx context.Context, addr string) (io.ReadCloser, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://%s:%d", addr, EtcdPort)}, Context: ctx})
	if err != nil {
		return nil, err
	}

	rd, err := cli.Snapshot(ctx)
	if err != nil {
		cli.Close() //nolint:errcheck

		return nil, err
	}

	return &closeBoth{ReadCloser: rd, client: cli}, nil
}

// closeBoth closes the snapshot stream, then its client.
type closeBoth struct {
	io.ReadCloser
	client *clientv3.Client
}

func (c *closeBoth) Close() error {
	err := c.ReadCloser.Close()
	if cerr := c.client.Close(); err == nil {
		err = cerr
	}

	return err
}

// RestoreEtcd makes dataDir (absent or empty) an etcd data directory
// holding the snapshot, for a member named name whose peer URL is on addr,
// as Talos' bootstrap with recover_etcd does (etcdutl's snapshot restore:
// the same code Talos links). It refuses a snapshot whose SHA-256 does
// not match unless skipHashCheck (a copy of a data directory's db).
func RestoreEtcd(ctx context.Context, bin, snapshot, dataDir, name, addr string, skipHashCheck bool) error {
	peerURL := fmt.Sprintf("http://%s:%d", addr, EtcdPeerPort)
	args := []string{"snapshot", "restore", snapshot, "--data-dir", dataDir, "--name", name,
		"--initial-cluster", name + "=" + peerURL, "--initial-advertise-peer-urls", peerURL}
	if skipHashCheck {
		args = append(args, "--skip-hash-check")
	}

	out, err := exec.CommandContext(ctx, filepath.Join(bin, "etcdutl"), args...).CombinedOutput() //nolint:gosec
	if err != nil {
		return fmt.Errorf("etcdutl snapshot restore: %w: %s", err, strings.TrimSpace(string(out)))
	}

	return nil
}
