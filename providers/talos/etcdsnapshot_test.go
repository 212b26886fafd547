package talos_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/lab/talosnode"
	"github.com/homelab-migrate/migrate/lab/talosvm"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// snapshotLab is a lab node whose (simulated) etcd is bootstrapped and
// holds a key, and a provider that keeps its files in stateDir.
func snapshotLab(t *testing.T) (l *lab, p *talos.Provider, stateDir string) {
	t.Helper()
	l = startNodeWith(t, talosnode.Options{Version: "v1.13.3", EtcdStartup: -1})
	stateDir = filepath.Join(t.TempDir(), ".migrate")
	p = l.providerWithState(t, stateDir, nil)
	var log bytes.Buffer
	if r := apply(context.Background(), p, talos.Bootstrap, obj(map[string]cty.Value{}), &log); r.Diagnostics.HasErrors() {
		t.Fatalf("bootstrap: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	if err := l.n.PutEtcd("/registry/configmaps/default/kept", "before"); err != nil {
		t.Fatal(err)
	}
	return l, p, stateDir
}

// providerWithState is l.provider told where the state keeps its files.
func (l *lab) providerWithState(t *testing.T, stateDir string, extra map[string]cty.Value) *talos.Provider {
	t.Helper()
	p := talos.New()
	t.Cleanup(func() { _ = p.Close() })
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Config: l.providerConfig(extra), Dir: l.dir, StateDir: stateDir})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

// snapshotsOf reads the snapshots a step's revert data records.
func snapshotsOf(t *testing.T, rv *providers.RevertData) map[string]struct {
	File   string    `json:"file"`
	SHA256 string    `json:"sha256"`
	Size   int64     `json:"size"`
	Taken  time.Time `json:"taken"`
	Before string    `json:"before"`
} {
	t.Helper()
	if rv == nil {
		t.Fatal("no revert data")
	}
	b, err := json.Marshal(rv.Data)
	if err != nil {
		t.Fatal(err)
	}
	var inv struct {
		Snapshots map[string]struct {
			File   string    `json:"file"`
			SHA256 string    `json:"sha256"`
			Size   int64     `json:"size"`
			Taken  time.Time `json:"taken"`
			Before string    `json:"before"`
		} `json:"etcd_snapshots"`
	}
	if err := json.Unmarshal(b, &inv); err != nil {
		t.Fatal(err)
	}
	return inv.Snapshots
}

// TestConfigApplySnapshotsEtcdFirst: before a config apply on a
// bootstrapped control plane the plan says a snapshot will be taken, and
// the apply takes it before its TRY: kept age-encrypted beside the state
// (no clear byte of it on disk), its digest, size and time in the revert
// data, matching the file once decrypted.
func TestConfigApplySnapshotsEtcdFirst(t *testing.T) {
	t.Parallel()
	l, p, stateDir := snapshotLab(t)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "try_timeout": cty.StringVal("30s")})

	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "+ etcd snapshot before this change (each control-plane node whose etcd runs), kept encrypted at " + filepath.Join(stateDir, "etcd-snapshots"); !strings.Contains(pr.Diff, want) {
		t.Errorf("the plan does not say %q:\n%s", want, pr.Diff)
	}

	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	snaps := snapshotsOf(t, r.Revert)
	s, ok := snaps["127.0.0.1"] // the node, as the endpoint names it
	if !ok || len(snaps) != 1 {
		t.Fatalf("the revert data records snapshots %+v, want one of node 127.0.0.1", snaps)
	}
	if filepath.Dir(s.File) != filepath.Join(stateDir, "etcd-snapshots") || s.Before != "talos_machine_config.node" {
		t.Errorf("snapshot record %+v", s)
	}
	for _, a := range l.n.Applies() {
		if !a.DryRun && !s.Taken.Before(a.Time) {
			t.Errorf("the snapshot (taken %s) was not taken before the %s apply at %s", s.Taken, a.Mode, a.Time)
		}
	}
	if !strings.Contains(log.String(), "etcd snapshot taken before this change") {
		t.Errorf("the log does not say a snapshot was taken:\n%s", log.String())
	}
	if !strings.Contains(r.Revert.Description, "restore it from its etcd snapshot") {
		t.Errorf("the revert's description does not offer the snapshot: %s", r.Revert.Description)
	}

	sealed, err := os.ReadFile(s.File)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.File); fi.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot file's mode is %v, want 0600", fi.Mode().Perm())
	}
	if !bytes.HasPrefix(sealed, []byte("age-encryption.org/v1\n")) || bytes.Contains(sealed, []byte("/registry/configmaps")) {
		t.Fatal("the snapshot is not age-encrypted at rest")
	}
	rd, err := age.Decrypt(bytes.NewReader(sealed), l.id)
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if _, err := plain.ReadFrom(rd); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(plain.Bytes()); hex.EncodeToString(sum[:]) != s.SHA256 || int64(plain.Len()) != s.Size {
		t.Errorf("the decrypted snapshot (%d bytes) does not match its record %+v", plain.Len(), s)
	}
	if !bytes.Contains(plain.Bytes(), []byte("/registry/configmaps/default/kept=before")) {
		t.Error("the decrypted snapshot lacks the key etcd held")
	}
	assertNoSecrets(t, "the log", log.String(), l.bundleSecrets(t))
}

// TestRollbackRestoresLostEtcd: after the change, the node loses its
// etcd. Reading the step (what rollback's plan asks) names the snapshot
// it will restore; running the step again refuses, saying so; the
// rollback uploads the snapshot and bootstraps etcd from it: the key
// written before the snapshot is back, the one written after is not.
func TestRollbackRestoresLostEtcd(t *testing.T) {
	t.Parallel()
	l, p, _ := snapshotLab(t)
	before := l.n.Config()
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "try_timeout": cty.StringVal("30s")})
	var log bytes.Buffer
	r := apply(context.Background(), p, talos.MachineConfig, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	s := snapshotsOf(t, r.Revert)["127.0.0.1"]
	if err := l.n.PutEtcd("/registry/configmaps/default/later", "after"); err != nil {
		t.Fatal(err)
	}
	if err := l.n.LoseEtcd(); err != nil {
		t.Fatal(err)
	}

	prior := &providers.Prior{Outputs: r.Outputs, Revert: r.Revert}
	rr := p.Read(context.Background(), providers.ReadRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior})
	want := "its etcd is lost (etcd is Preparing"
	if rr.Observation != providers.Drifted || !strings.Contains(rr.Detail, want) || !strings.Contains(rr.Detail, "rollback restores etcd from snapshot "+s.File) {
		t.Errorf("Read of a node whose etcd is lost = %v %q, want drift naming the snapshot", rr.Observation, rr.Detail)
	}

	again := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Prior: prior, Log: &log})
	if err := again.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), "etcd is lost") || !strings.Contains(err.Error(), s.File) {
		t.Errorf("a change to a node whose etcd is lost: %v, want a refusal naming the snapshot", err)
	}

	var rlog bytes.Buffer
	rv := p.Revert(context.Background(), providers.RevertRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: cfg, Revert: *r.Revert, Outputs: r.Outputs, Log: &rlog})
	if err := rv.Diagnostics.Err(); err != nil {
		t.Fatalf("Revert: %v\n%s", err, rlog.String())
	}
	if !l.n.EtcdHas("/registry/configmaps/default/kept", "before") {
		t.Error("the key written before the snapshot is not back")
	}
	if l.n.EtcdHas("/registry/configmaps/default/later", "after") {
		t.Error("the key written after the snapshot is there: etcd was not restored from it")
	}
	if !bytes.Equal(l.n.PersistedConfig(), before) {
		t.Error("the rollback did not bring back the previous config")
	}
	if !strings.Contains(rlog.String(), "etcd recovered from the snapshot taken at") {
		t.Errorf("the rollback log does not say etcd was recovered:\n%s", rlog.String())
	}
	assertNoSecrets(t, "the rollback log", rlog.String(), l.bundleSecrets(t))
}

// TestUpgradeSnapshotsEtcdFirst: an upgrade of a bootstrapped control
// plane is planned and applied with a snapshot first, recorded in its
// revert data.
func TestUpgradeSnapshotsEtcdFirst(t *testing.T) {
	t.Parallel()
	l := startNodeWith(t, talosnode.Options{Version: "v1.13.2", EtcdStartup: -1})
	stateDir := filepath.Join(t.TempDir(), ".migrate")
	old := l.providerWithState(t, stateDir, map[string]cty.Value{"version": cty.StringVal("v1.13.2")})
	ctx := context.Background()
	if r := apply(ctx, old, talos.Bootstrap, cty.EmptyObjectVal, &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	p := l.providerWithState(t, stateDir, nil)
	cfg := obj(map[string]cty.Value{"version": cty.StringVal("v1.13.3")})
	if pr := plan(p, talos.Upgrade, cfg); !strings.Contains(pr.Diff, "+ etcd snapshot before this change") {
		t.Errorf("the upgrade's plan does not say a snapshot is taken first:\n%s", pr.Diff)
	}
	var log bytes.Buffer
	r := apply(ctx, p, talos.Upgrade, cfg, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("upgrade: %v\n%s", err, log.String())
	}
	s, ok := snapshotsOf(t, r.Revert)["127.0.0.1"]
	if !ok || s.Before != "talos_upgrade.node" || !strings.HasPrefix(s.File, stateDir) {
		t.Fatalf("the upgrade recorded no snapshot of its node: %+v", r.Revert.Data)
	}
	if i, j := strings.Index(log.String(), "etcd snapshot taken before this change"), strings.Index(log.String(), "upgrading Talos"); i < 0 || j < i {
		t.Errorf("the log does not show the snapshot before the upgrade:\n%s", log.String())
	}
}

// TestLostEtcdRestoredOnLabVM: the same, with the lab VM's real etcd and
// API server: a ConfigMap made before the config change is back after the
// node lost its etcd and the change was rolled back; one made after the
// snapshot is not.
func TestLostEtcdRestoredOnLabVM(t *testing.T) {
	t.Parallel()
	addr := freeNodeAddr(t)
	vm, err := talosvm.Boot(context.Background(), talosvm.Spec{
		Name: "talos", Addr: addr, Dir: t.TempDir(), Disks: maintDisks, DataDir: t.TempDir(),
		RebootDuration: 200 * time.Millisecond, Log: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)
	l := newMaintLab(t, vm.Node(), talosvm.Endpoint(addr))
	conf := l.config(false)
	conf["cluster_endpoint"] = cty.StringVal(talosvm.Endpoint(addr))
	p := l.provider(t, conf)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	install := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "verify": verify([]string{"apid"}, nil)})
	pr := plan(p, talos.MachineConfig, install)
	var log bytes.Buffer
	if r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: install, Planned: pr.Private, Log: &log}); r.Diagnostics.HasErrors() {
		t.Fatalf("first install: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	if r := apply(ctx, p, talos.Bootstrap, cty.EmptyObjectVal, &log); r.Diagnostics.HasErrors() {
		t.Fatalf("bootstrap: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	k := labKube(t, ctx, p, vm)
	configMap(t, ctx, k, "before")

	l.write(t, "patches/labels.yaml", "machine:\n  nodeLabels:\n    lab: \"yes\"\n")
	change := obj(map[string]cty.Value{"patches": strs("patches/node.yaml", "patches/labels.yaml"), "verify": verify([]string{"apid", "etcd"}, nil)})
	pr = plan(p, talos.MachineConfig, change)
	log.Reset()
	r := p.Apply(ctx, providers.ApplyRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: change, Planned: pr.Private, Log: &log})
	if r.Diagnostics.HasErrors() {
		t.Fatalf("config change: %v\n%s", r.Diagnostics.Err(), log.String())
	}
	if len(snapshotsOf(t, r.Revert)) != 1 {
		t.Fatalf("the change kept no snapshot of the real etcd:\n%s", log.String())
	}
	configMap(t, ctx, k, "after")
	if err := vm.Node().LoseEtcd(); err != nil {
		t.Fatal(err)
	}

	var rlog bytes.Buffer
	rv := p.Revert(ctx, providers.RevertRequest{Type: talos.MachineConfig, Addr: mcAddr, Config: change, Revert: *r.Revert, Outputs: r.Outputs, Log: &rlog})
	if err := rv.Diagnostics.Err(); err != nil {
		t.Fatalf("Revert: %v\n%s", err, rlog.String())
	}
	k = labKube(t, ctx, p, vm)
	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("the ConfigMap made before the snapshot: %v\n%s", err, rlog.String())
	}
	if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap made after the snapshot: %v, want not found", err)
	}
}

// labKube waits for the VM's Kubernetes and returns a client of the
// kubeconfig talos_kubeconfig writes.
func labKube(t *testing.T, ctx context.Context, p *talos.Provider, vm *talosvm.VM) *kubernetes.Clientset {
	t.Helper()
	if err := vm.WaitKubernetes(ctx); err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if r := apply(ctx, p, talos.Kubeconfig, obj(map[string]cty.Value{"path": cty.StringVal(kcPath)}), &bytes.Buffer{}); r.Diagnostics.HasErrors() {
		t.Fatalf("kubeconfig: %v", r.Diagnostics.Err())
	}
	kc, err := os.ReadFile(kcPath)
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
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"made": name}}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
