package examples

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/homelab-migrate/migrate/lab/talosnode"
)

// TestTalosPlatformEtcdSnapshotAndRestore: through migrate and its talos
// program, a config change to a bootstrapped node is planned and run with
// an etcd snapshot first, kept age-encrypted in the state's directory; the
// node then loses its etcd, the rollback's plan names the snapshot it
// restores, and the rollback brings etcd back from it: the key written
// before the change is there, the one written after is not.
func TestTalosPlatformEtcdSnapshotAndRestore(t *testing.T) {
	t.Parallel()
	labDir := t.TempDir()
	node, err := talosnode.New(talosnode.Options{Dir: labDir, EtcdStartup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	dir := copyExample(t, "talos-platform")
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(t.TempDir(), "age.key")
	if err := os.WriteFile(identity, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MIGRATE_AGE_IDENTITY=" + identity}
	vars := []string{"--var", "lab=" + labDir}

	// The first run installs the config before the bootstrap: no etcd runs
	// yet, so there is nothing to snapshot.
	out := run(t, dir, env, append([]string{"run", "--phase", "platform", "--auto-approve"}, vars...)...)
	if !strings.Contains(out, "no etcd snapshot before this change: etcd does not run") {
		t.Errorf("the first run does not say why it took no snapshot:\n%s", out)
	}
	if err := node.PutEtcd("/registry/configmaps/default/kept", "before"); err != nil {
		t.Fatal(err)
	}

	// A change to the running control plane: snapshot first.
	patch := filepath.Join(dir, "patches/node.yaml")
	b, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(patch, bytes.Replace(b, []byte("hostname: lab-node\n"), []byte("hostname: lab-node2\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(dir, ".migrate", "etcd-snapshots")
	if out := run(t, dir, env, append([]string{"plan"}, vars...)...); !strings.Contains(out, "+ etcd snapshot before this change (each control-plane node whose etcd runs), kept encrypted at "+snapDir) {
		t.Errorf("the plan of the change does not say a snapshot is taken first:\n%s", out)
	}
	out = run(t, dir, env, append([]string{"run", "--phase", "platform", "--auto-approve"}, vars...)...)
	if !strings.Contains(out, "etcd snapshot taken before this change") {
		t.Errorf("the run does not show the snapshot:\n%s", out)
	}
	files, _ := filepath.Glob(filepath.Join(snapDir, "*.db.age"))
	if len(files) != 1 {
		t.Fatalf("snapshots kept in %s: %v, want one", snapDir, files)
	}
	if sealed, err := os.ReadFile(files[0]); err != nil || !bytes.HasPrefix(sealed, []byte("age-encryption.org/v1\n")) || bytes.Contains(sealed, []byte("/registry/")) {
		t.Fatalf("the snapshot is not age-encrypted at rest: %v", err)
	}

	if err := node.PutEtcd("/registry/configmaps/default/later", "after"); err != nil {
		t.Fatal(err)
	}
	if err := node.LoseEtcd(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out = run(t, dir, env, append([]string{"rollback", "--auto-approve"}, vars...)...)
	if !strings.Contains(out, "its etcd is lost (etcd is Preparing") || !strings.Contains(out, "rollback restores etcd from snapshot "+files[0]) {
		t.Errorf("the rollback's plan does not name the snapshot it restores:\n%s", out)
	}
	if !node.EtcdHas("/registry/configmaps/default/kept", "before") || node.EtcdHas("/registry/configmaps/default/later", "after") {
		t.Errorf("etcd was not restored from the snapshot (rollback took %s):\n%s", time.Since(start).Round(time.Second), out)
	}
	if !strings.Contains(out, "etcd recovered from the snapshot taken at") {
		t.Errorf("the rollback does not say it recovered etcd:\n%s", out)
	}
}
