package talosvm

import (
	"context"
	"errors"
	"io"

	"github.com/homelab-migrate/migrate/lab/kubecp"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
)

// EtcdSnapshot streams a snapshot of the node's real etcd
// (talosnode.EtcdSnapshotter): what Talos' EtcdSnapshot RPC sends.
func (k *kube) EtcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	if !k.EtcdHealthy(ctx) {
		return nil, errors.New("etcd is not running on this node")
	}

	return kubecp.EtcdSnapshot(ctx, k.spec.Addr)
}

// RestoreEtcd restores the node's etcd data directory from a snapshot
// before etcd starts (talosnode.EtcdRestorer), with etcdutl as Talos'
// bootstrap with recover_etcd does, for the member name kubecp gives etcd.
func (k *kube) RestoreEtcd(ctx context.Context, cfg talosconfig.Config, snapshot, etcdDir string, skipHashCheck bool) error {
	bin, err := kubecp.Binaries(ctx, k.spec.Log)
	if err != nil {
		return err
	}

	return kubecp.RestoreEtcd(ctx, bin, snapshot, etcdDir, hostname(cfg, k.spec.Name), k.spec.Addr, skipHashCheck)
}
