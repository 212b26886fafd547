package talosnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdRecoverySnapshotPath is where EtcdRecover puts the uploaded
// snapshot, under Root(): Talos' constants.EtcdRecoverySnapshotPath.
const EtcdRecoverySnapshotPath = "/var/lib/etcd.snapshot"

// etcdDBPath is the simulated etcd's database (no ControlPlane), under
// Root(): where etcd keeps its bbolt file.
const etcdDBPath = "/var/lib/etcd/member/snap/db"

// EtcdSnapshotter is a ControlPlane whose etcd streams a snapshot, as
// etcd's Maintenance API does: the database, then its SHA-256.
type EtcdSnapshotter interface {
	EtcdSnapshot(ctx context.Context) (io.ReadCloser, error)
}

// EtcdRestorer is a ControlPlane that restores etcd's data directory
// from a snapshot before etcd starts (etcdutl snapshot restore).
type EtcdRestorer interface {
	RestoreEtcd(ctx context.Context, cfg talosconfig.Config, snapshot, etcdDir string, skipHashCheck bool) error
}

// EtcdSnapshot implements machine.MachineServiceServer: a snapshot of the
// node's etcd in common.Data chunks, as machined streams its etcd
// client's Snapshot.
func (s *server) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	if err := s.checkControlplane("etcd snapshot"); err != nil {
		return err
	}

	rd, err := s.n.etcdSnapshot(srv.Context())
	if err != nil {
		return fmt.Errorf("failed reading etcd snapshot: %w", err)
	}
	defer rd.Close() //nolint:errcheck

	buf := make([]byte, readChunkSize)

	for {
		k, err := rd.Read(buf)
		if k > 0 {
			if serr := srv.Send(&common.Data{Bytes: bytes.Clone(buf[:k])}); serr != nil {
				return serr
			}
		}

		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("failed reading etcd snapshot: %w", err)
		}
	}
}

// etcdSnapshot opens a snapshot of the running etcd: the real one's, or
// the simulated database with its SHA-256 appended.
func (n *Node) etcdSnapshot(ctx context.Context) (io.ReadCloser, error) {
	n.mu.Lock()
	bootstrapped, since := n.state.Bootstrapped, n.etcdSince
	n.mu.Unlock()

	if !n.etcdHealthy(bootstrapped, since) {
		return nil, errors.New("etcd is not running on this node")
	}

	if sn, ok := n.opts.ControlPlane.(EtcdSnapshotter); ok {
		return sn.EtcdSnapshot(ctx)
	}

	db, err := os.ReadFile(filepath.Join(n.rootDir, etcdDBPath))
	if err != nil {
		return nil, err
	}

	sum := sha256.Sum256(db)

	return io.NopCloser(io.MultiReader(bytes.NewReader(db), bytes.NewReader(sum[:]))), nil
}

// EtcdRecover implements machine.MachineServiceServer: the uploaded
// snapshot is kept at EtcdRecoverySnapshotPath for the next Bootstrap with
// recover_etcd, as machined keeps it.
func (s *server) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	path := filepath.Join(s.n.rootDir, EtcdRecoverySnapshotPath)

	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	}

	if err := s.checkControlplane("etcd recover"); err != nil {
		return err
	}

	if err := receiveTo(path, srv); err != nil {
		return err
	}

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

// receiveTo writes the client's stream to path, synced; nothing is left
// there when it fails.
func receiveTo(path string, srv machine.MachineService_EtcdRecoverServer) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o700)
	if err != nil {
		return fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}

	defer func() {
		f.Close() //nolint:errcheck

		if err != nil {
			os.Remove(path) //nolint:errcheck
		}
	}()

	for {
		msg, rerr := srv.Recv()
		if errors.Is(rerr, io.EOF) {
			break
		}

		if rerr != nil {
			return rerr
		}

		if _, err = f.Write(msg.GetBytes()); err != nil {
			return fmt.Errorf("error writing snapshot: %w", err)
		}
	}

	if err = f.Sync(); err != nil {
		return fmt.Errorf("error fsyncing snapshot: %w", err)
	}

	return f.Close()
}

// checkSnapshot verifies a snapshot as etcdutl's snapshot status and
// restore do: a database of 512-byte pages followed by its SHA-256.
func checkSnapshot(b []byte) error {
	if len(b)%512 != sha256.Size {
		return fmt.Errorf("sha256 checksum not found (size %d)", len(b))
	}

	db, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if sum := sha256.Sum256(db); !bytes.Equal(sum[:], trailer) {
		return errors.New("expected sha256 does not match the snapshot's (snapshot file might be corrupted)")
	}

	return nil
}

// recoverEtcdLocked restores etcd's data directory from the uploaded
// snapshot before the bootstrap starts etcd, as machined's etcd service
// does for recover_etcd, and removes the snapshot.
func (n *Node) recoverEtcdLocked(ctx context.Context, etcdDir string, skipHashCheck bool) error {
	path := filepath.Join(n.rootDir, EtcdRecoverySnapshotPath)

	b, err := os.ReadFile(path)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "error verifying snapshot: %v", err)
	}

	if !skipHashCheck {
		if err := checkSnapshot(b); err != nil {
			return status.Errorf(codes.FailedPrecondition, "error recovering from the snapshot: %v", err)
		}
	}

	if err := n.restoreEtcdLocked(ctx, path, etcdDir, b, skipHashCheck); err != nil {
		os.RemoveAll(etcdDir) //nolint:errcheck

		return status.Errorf(codes.Internal, "error recovering from the snapshot: %v", err)
	}

	n.logfLocked(facilityUser, "warning", "[talos] recovering etcd from snapshot: total size %d", len(b))

	return os.Remove(path)
}

// restoreEtcdLocked fills etcdDir from the snapshot: the real etcd's by
// etcdutl, the simulated one's by its database.
func (n *Node) restoreEtcdLocked(ctx context.Context, path, etcdDir string, b []byte, skipHashCheck bool) error {
	if r, ok := n.opts.ControlPlane.(EtcdRestorer); ok {
		cfg, err := configloader.NewFromBytes(n.active)
		if err != nil {
			return err
		}

		return r.RestoreEtcd(ctx, cfg, path, etcdDir, skipHashCheck)
	}

	db := filepath.Join(n.rootDir, etcdDBPath)
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return err
	}

	return os.WriteFile(db, b[:len(b)-sha256.Size], 0o600)
}

// initEtcdLocked makes the simulated etcd's database at a bootstrap that
// does not recover: one page naming the cluster, as a fresh etcd's bbolt
// file holds only its own metadata.
func (n *Node) initEtcdLocked() error {
	if n.opts.ControlPlane != nil {
		return nil // the real etcd makes its own
	}

	db := filepath.Join(n.rootDir, etcdDBPath)
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		return err
	}

	page := make([]byte, 4096)
	copy(page, fmt.Sprintf("lab etcd of cluster %q", n.opts.ClusterName))

	return os.WriteFile(db, page, 0o600)
}

// PutEtcd writes a key into the simulated etcd's database (no
// ControlPlane), so that a test can tell a restored database from a new
// one: the database is rewritten with the key appended on a new page.
func (n *Node) PutEtcd(key, value string) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.opts.ControlPlane != nil || !n.state.Bootstrapped {
		return errors.New("talosnode: PutEtcd needs a bootstrapped node with the simulated etcd")
	}

	db := filepath.Join(n.rootDir, etcdDBPath)

	b, err := os.ReadFile(db)
	if err != nil {
		return err
	}

	page := make([]byte, 4096)
	copy(page, key+"="+value)

	return os.WriteFile(db, append(b, page...), 0o600)
}

// EtcdHas says whether the simulated etcd's database holds key=value.
func (n *Node) EtcdHas(key, value string) bool {
	b, err := os.ReadFile(filepath.Join(n.rootDir, etcdDBPath))

	return err == nil && bytes.Contains(b, []byte(key+"="+value))
}

// LoseEtcd loses the node's etcd, as a bad change or a disk failure can on
// a single control-plane node: etcd stops (the node's Kubernetes with it),
// its data directory is emptied, and the node waits for a bootstrap
// (ServiceList: etcd Preparing), as a node whose etcd data is gone does.
// For tests.
func (n *Node) LoseEtcd() error {
	if n.opts.ControlPlane != nil {
		n.opts.ControlPlane.Stop()
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	etcdDir := filepath.Join(n.rootDir, "var/lib/etcd")
	if err := os.RemoveAll(etcdDir); err != nil {
		return err
	}

	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return err
	}

	n.state.Bootstrapped = false
	n.logfLocked(facilityUser, "warning", "[talos] etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap`")

	return n.saveStateLocked()
}
