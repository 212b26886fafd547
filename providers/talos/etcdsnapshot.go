package talos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// A bad config, upgrade or reboot can lose a single control-plane node's
// etcd, and with it the cluster. So before each such change the provider
// takes a snapshot of the node's etcd (the EtcdSnapshot RPC, what talosctl
// etcd snapshot calls), checks it, and keeps it age-encrypted (it holds
// every Secret of the cluster) in a file beside the state, recorded with
// its digest in the step's revert data. Rollback restores it, when the
// node's etcd is lost, as talosctl bootstrap --recover-from does.

// etcdSnapshotDir is the directory, under the state's, that keeps them.
const etcdSnapshotDir = "etcd-snapshots"

// etcdSnapshot is one snapshot kept before a change, as a step records it.
type etcdSnapshot struct {
	Node string `json:"node"`
	// File holds the snapshot age-encrypted.
	File string `json:"file"`
	// SHA256 is the snapshot's own (decrypted, its trailer included);
	// Size its length in bytes.
	SHA256 string    `json:"sha256"`
	Size   int64     `json:"size"`
	Taken  time.Time `json:"taken"`
	// Before is the step whose change it preceded.
	Before string `json:"before"`
}

// String names it for a plan or a log.
func (s etcdSnapshot) String() string {
	return fmt.Sprintf("%s (sha256 %s, taken at %s before %s)", s.File, short(s.SHA256), s.Taken.UTC().Format(time.RFC3339), s.Before)
}

// snapshotDir is where this provider keeps etcd snapshots.
func (s *settings) snapshotDir() string {
	if s.stateDir != "" {
		return filepath.Join(s.stateDir, etcdSnapshotDir)
	}
	return filepath.Join(s.dir, ".migrate", etcdSnapshotDir)
}

// snapshotPlanLine is what a plan says of the snapshot before a change.
func (c *call) snapshotPlanLine() string {
	if c.s.recipient == nil {
		return fmt.Sprintf("! no etcd snapshot before this change: it holds the cluster's secrets and is kept only age-encrypted, but %s\n", c.s.noKeyWhy)
	}
	return fmt.Sprintf("+ etcd snapshot before this change (each control-plane node whose etcd runs), kept encrypted at %s\n", c.s.snapshotDir())
}

// snapshotRecipients are whom a snapshot is encrypted to: the identity's
// recipient, so that rollback can read it, and the runbook's recipients
// (.age-recipients), whom its other secrets are sealed to.
func (c *call) snapshotRecipients() []age.Recipient {
	rs := []age.Recipient{c.s.recipient}
	if more, err := agefile.RunbookRecipients(c.s.dir); err == nil {
		rs = append(rs, more...)
	}
	return rs
}

// etcdState says whether etcd runs on the node, and what it does else
// ("" when the node has no etcd: a worker).
func etcdState(ctx context.Context, n node) (running bool, state string, err error) {
	have, err := n.services(ctx)
	if err != nil {
		return false, "", err
	}
	s, ok := have["etcd"]
	if !ok {
		return false, "", nil
	}
	if s.GetState() == "Running" {
		return true, "Running", nil
	}
	state = s.GetState()
	if ev := s.GetEvents().GetEvents(); len(ev) > 0 {
		state += ": " + ev[len(ev)-1].GetMsg()
	}
	return false, state, nil
}

// snapshotBefore takes and keeps a snapshot of the node's etcd before the
// step changes the node; nil when there is nothing to snapshot (a worker,
// etcd not bootstrapped yet) or no key to keep it with, which the log says.
// A snapshot that cannot be taken or checked fails the change.
func (c *call) snapshotBefore(ctx context.Context, n node) (*etcdSnapshot, phases.Diagnostics) {
	running, state, err := etcdState(ctx, n)
	switch {
	case err != nil:
		return nil, phases.Errorf("Cannot Snapshot etcd", "Before changing node %s, %s asks whether etcd runs there, to snapshot it: %v.", n.name, c.addr, err)
	case state == "":
		return nil, nil // no etcd on a worker
	case !running:
		c.log.Printf("node %s: no etcd snapshot before this change: etcd does not run (%s)", n.name, state)
		return nil, nil
	case c.s.recipient == nil:
		c.log.Printf("node %s: no etcd snapshot before this change: it holds the cluster's secrets and is kept only age-encrypted, but %s; set age_identity or %s", n.name, c.s.noKeyWhy, IdentityEnv)
		return nil, nil
	}
	snap, err := c.takeSnapshot(ctx, n)
	if err != nil {
		c.captureDmesg(ctx, n)
		return nil, phases.Errorf("Cannot Snapshot etcd", "Before changing node %s, %s takes a snapshot of its etcd, which failed: %v. Nothing was changed; the change waits for a snapshot that can be kept.", n.name, c.addr, err)
	}
	c.log.Printf("node %s: etcd snapshot taken before this change: %d bytes, sha256 %s, kept encrypted at %s", n.name, snap.Size, snap.SHA256, snap.File)
	return snap, nil
}

// takeSnapshot streams the node's snapshot into an age-encrypted file,
// checking on the way its SHA-256 trailer (etcd's snapshot format), and
// renames it into place only when whole and checked.
func (c *call) takeSnapshot(ctx context.Context, n node) (*etcdSnapshot, error) {
	dir := c.s.snapshotDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	taken := time.Now().UTC()
	name := fmt.Sprintf("%s-%s.db.age", safeName(n.name), taken.Format("20060102T150405.000Z"))
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rd, err := n.c.EtcdSnapshot(n.at(sctx), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		return nil, apiErr("EtcdSnapshot", err)
	}
	defer rd.Close()
	enc, err := age.Encrypt(tmp, c.snapshotRecipients()...)
	if err != nil {
		return nil, err
	}
	check := newTrailerCheck()
	size, err := io.Copy(io.MultiWriter(enc, check), rd)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", apiErr("EtcdSnapshot", err))
	}
	if err := check.verify(size); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), final); err != nil {
		return nil, err
	}
	return &etcdSnapshot{Node: n.name, File: final, SHA256: check.sum(), Size: size, Taken: taken, Before: c.addr.String()}, nil
}

// safeName makes a node's name a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ':' || r == '\\' {
			return '_'
		}
		return r
	}, s)
}

// trailerCheck hashes a snapshot as it streams: the whole of it (its
// digest) and all but its last 32 bytes, which etcd's format makes the
// SHA-256 of the rest.
type trailerCheck struct {
	all, db hash.Hash
	tail    []byte // the last bytes seen, not yet hashed into db
}

func newTrailerCheck() *trailerCheck {
	return &trailerCheck{all: sha256.New(), db: sha256.New()}
}

func (t *trailerCheck) Write(p []byte) (int, error) {
	t.all.Write(p)
	t.tail = append(t.tail, p...)
	if keep := len(t.tail) - sha256.Size; keep > 0 {
		t.db.Write(t.tail[:keep])
		t.tail = append(t.tail[:0], t.tail[keep:]...)
	}
	return len(p), nil
}

// verify checks the size and the trailer, as talosctl etcd snapshot and
// etcdutl snapshot restore do.
func (t *trailerCheck) verify(size int64) error {
	if size%512 != sha256.Size {
		return fmt.Errorf("the snapshot of %d bytes carries no SHA-256 trailer (etcd's snapshot format: 512-byte pages, then their SHA-256)", size)
	}
	if !bytes.Equal(t.db.Sum(nil), t.tail) {
		return errors.New("the snapshot's SHA-256 trailer does not match its content: it was damaged on its way")
	}
	return nil
}

func (t *trailerCheck) sum() string { return hex.EncodeToString(t.all.Sum(nil)) }

// openSnapshot decrypts a kept snapshot for reading.
func (c *call) openSnapshot(s etcdSnapshot) (io.Reader, func() error, error) {
	f, err := os.Open(s.File)
	if err != nil {
		return nil, nil, err
	}
	r, err := age.Decrypt(f, c.s.identity)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s cannot be decrypted with the configured age identity: %w", s.File, err)
	}
	return r, f.Close, nil
}

// checkKept decrypts a kept snapshot and compares it with its record.
func (c *call) checkKept(s etcdSnapshot) error {
	r, closeFile, err := c.openSnapshot(s)
	if err != nil {
		return err
	}
	defer closeFile()
	h := sha256.New()
	size, err := io.Copy(h, r)
	if err != nil {
		return fmt.Errorf("decrypting %s: %w", s.File, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != s.SHA256 || size != s.Size {
		return fmt.Errorf("%s is not the snapshot recorded (sha256 %s, %d bytes; recorded %s, %d bytes)", s.File, short(got), size, short(s.SHA256), s.Size)
	}
	return nil
}

// lostEtcd says why the node's etcd counts as lost ("" when it runs, or
// when the node does not answer: nothing can be told then).
func lostEtcd(ctx context.Context, n node) string {
	running, state, err := etcdState(ctx, n)
	if err != nil || running {
		return ""
	}
	if state == "" {
		return "the node lists no etcd service"
	}
	return "etcd is " + state
}

// etcdSettle is how long a node's etcd must stay down before a revert
// takes it for lost and restores it: right after a boot etcd is not
// running either, for a while.
var etcdSettle = 20 * time.Second

// stillLost waits up to etcdSettle for the node's etcd to run again, and
// says why it counts as lost ("" when it runs by then).
func stillLost(ctx context.Context, n node) string {
	why := lostEtcd(ctx, n)
	for deadline := time.Now().Add(etcdSettle); why != "" && time.Now().Before(deadline); why = lostEtcd(ctx, n) {
		select {
		case <-ctx.Done():
			return why
		case <-time.After(time.Second):
		}
	}
	return why
}

// lostEtcdNotes lists, for a read before a rollback, the nodes whose etcd
// is lost and the snapshot the rollback restores each from.
func (c *call) lostEtcdNotes(ctx context.Context, snaps map[string]etcdSnapshot) []string {
	if len(snaps) == 0 {
		return nil
	}
	ns, err := c.p.nodes(ctx)
	if err != nil {
		return nil
	}
	var notes []string
	for _, n := range ns {
		s, ok := snaps[n.name]
		if !ok {
			continue
		}
		if why := lostEtcd(ctx, n); why != "" {
			notes = append(notes, fmt.Sprintf("node %s: its etcd is lost (%s): rollback restores etcd from snapshot %s", n.name, why, s))
		}
	}
	return notes
}

// refuseOnLostEtcd fails a change to a node whose etcd is lost, when the
// step kept a snapshot of it: a change now would build on a cluster that
// is gone; the error says where the snapshot is and how to restore it.
func (c *call) refuseOnLostEtcd(ctx context.Context, snaps map[string]etcdSnapshot) phases.Diagnostics {
	notes := c.lostEtcdNotes(ctx, snaps)
	if len(notes) == 0 {
		return nil
	}
	return phases.Errorf("etcd Lost", "%s. Nothing was changed. Roll back this step's phase (migrate rollback PHASE): its plan shows the restore, which uploads the snapshot (EtcdRecover) and bootstraps etcd from it (recover_etcd), as talosctl bootstrap --recover-from does; or decrypt the file with age and run that command yourself.", strings.Join(notes, "; "))
}

// restoreIfLost restores the node's etcd from the snapshot when it is
// lost: the upload (EtcdRecover), then the bootstrap with recover_etcd, then
// the wait for etcd. A node whose etcd runs is left alone.
func (c *call) restoreIfLost(ctx context.Context, n node, s etcdSnapshot) phases.Diagnostics {
	if lostEtcd(ctx, n) == "" {
		return nil
	}
	c.log.Printf("node %s: etcd does not run; waiting up to %s for it before taking it for lost", n.name, etcdSettle)
	why := stillLost(ctx, n)
	if why == "" {
		c.log.Printf("node %s: etcd runs again: nothing to restore", n.name)
		return nil
	}
	if c.s.identity == nil {
		return phases.Errorf("No Age Identity", "Node %s's etcd is lost (%s); restoring it from snapshot %s needs the age identity it was encrypted to: set age_identity or %s.", n.name, why, s, IdentityEnv)
	}
	c.log.Printf("node %s: its etcd is lost (%s): restoring it from snapshot %s", n.name, why, s)
	if err := c.checkKept(s); err != nil {
		return phases.Errorf("Snapshot Not Usable", "Node %s's etcd is lost (%s), and its snapshot cannot be used: %v. Nothing was sent to the node.", n.name, why, err)
	}
	r, closeFile, err := c.openSnapshot(s)
	if err != nil {
		return phases.Errorf("Snapshot Not Usable", "Opening snapshot %s: %v.", s.File, err)
	}
	defer closeFile()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := n.c.EtcdRecover(n.at(rctx), r); err != nil {
		return phases.Errorf("Etcd Recover Failed", "Uploading snapshot %s to node %s failed: %v.", s.File, n.name, apiErr("EtcdRecover", err))
	}
	if err := n.c.Bootstrap(n.at(rctx), &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		c.captureDmesg(ctx, n)
		return phases.Errorf("Etcd Recover Failed", "Node %s took the snapshot but refused the bootstrap that recovers etcd from it: %v.", n.name, apiErr("Bootstrap", err))
	}
	c.log.Printf("node %s: etcd recovered from the snapshot taken at %s", n.name, s.Taken.UTC().Format(time.RFC3339))
	d, _ := waitEtcd(ctx, c, n)
	return d
}

// snapshotNote is what a revert's description adds for its snapshots.
func snapshotNote(snaps map[string]etcdSnapshot) string {
	if len(snaps) == 0 {
		return ""
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(snaps)) {
		parts = append(parts, fmt.Sprintf("node %s from %s", name, snaps[name]))
	}
	return "; if a node's etcd is lost by then, first restore it from its etcd snapshot: " + strings.Join(parts, ", ")
}
