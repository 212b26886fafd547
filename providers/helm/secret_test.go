package helm_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// setTestIdentity puts a new age identity in MIGRATE_AGE_IDENTITY for
// every test (and the plugin programs they start), unless one is set.
func setTestIdentity() {
	if os.Getenv(providers.AgeIdentityEnv) != "" {
		return
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		panic(err)
	}
	os.Setenv(providers.AgeIdentityEnv, id.String())
}

// ageFile writes text encrypted (armored) to the identity in
// MIGRATE_AGE_IDENTITY and returns its path.
func ageFile(t testing.TB, name, text string) string {
	t.Helper()
	ids, err := agefile.Identities("")
	if err != nil || len(ids) == 0 {
		t.Fatalf("no age identity in %s: %v", providers.AgeIdentityEnv, err)
	}
	b, err := agefile.Encrypt([]byte(text), true, agefile.RecipientOf(ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// createNamespace creates a unique namespace, deleted when the test ends.
func (k *kube) createNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := k.namespace(t, prefix)
	if _, err := k.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func (k *kube) secretData(t testing.TB, ns, name string) map[string]string {
	t.Helper()
	s, err := k.client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for key, v := range s.Data {
		out[key] = string(v)
	}
	return out
}

func sameData(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: keys %v, want %v", what, got, want)
		return
	}
	for key, v := range want {
		if got[key] != v {
			t.Errorf("%s: key %s differs from the value expected", what, key)
		}
	}
}

func secretCfg(ns, name string, data map[string]string, files map[string]string) cty.Value {
	attrs := map[string]cty.Value{"name": str(name), "namespace": str(ns)}
	if data != nil {
		attrs["data"] = strMap(data)
	}
	if files != nil {
		attrs["files"] = strMap(files)
	}
	return obj(attrs)
}

// TestSecretCreateChangeRevert: a new Secret is planned with its keys
// only, created, re-planned as unchanged, changed (the plan names the
// key, never a value), and the revert deletes it, twice without error.
func TestSecretCreateChangeRevert(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "sec")
	const v1, v2 = "first-value-1c8e", "second-value-77a0"
	cfg := secretCfg(ns, "app", map[string]string{"token": v1, "user": "admin-name"}, nil)

	r := mustPlan(t, p, helm.Secret, "app", cfg)
	contains(t, "the plan", r.Diff, "+ Secret "+ns+"/app (keys: token, user)")
	a := mustApply(t, p, helm.Secret, "app", cfg, nil)
	sameData(t, "the Secret", k.secretData(t, ns, "app"), map[string]string{"token": v1, "user": "admin-name"})
	if got := a.Outputs.GetAttr("keys").GoString(); !strings.Contains(got, "token") || !strings.Contains(got, "user") {
		t.Errorf("keys output %s", got)
	}
	contains(t, "the revert data", a.Revert.Description, "delete Secret "+ns+"/app")

	r = mustPlan(t, p, helm.Secret, "app", cfg)
	contains(t, "the plan again", r.Diff, "Secret "+ns+"/app: no change")
	if rr := read(t, p, helm.Secret, "app", cfg, priorOf(a)); rr.Observation != providers.Present {
		t.Errorf("Read after apply: %v %s", rr.Observation, rr.Detail)
	}

	changed := secretCfg(ns, "app", map[string]string{"token": v2, "user": "admin-name"}, nil)
	r = mustPlan(t, p, helm.Secret, "app", changed)
	contains(t, "the plan of a change", r.Diff, "~ Secret "+ns+"/app (keys changed: token)")
	if rr := read(t, p, helm.Secret, "app", changed, priorOf(a)); rr.Observation != providers.Drifted {
		t.Errorf("Read of a changed step: %v %s", rr.Observation, rr.Detail)
	}
	b := mustApply(t, p, helm.Secret, "app", changed, priorOf(a))
	sameData(t, "the changed Secret", k.secretData(t, ns, "app"), map[string]string{"token": v2, "user": "admin-name"})
	for _, text := range []string{r.Diff, string(b.Revert.Data), b.Revert.Description, string(b.Private)} {
		if strings.Contains(text, v1) || strings.Contains(text, v2) {
			t.Errorf("a value shows in %q", text)
		}
	}

	revert(t, p, helm.Secret, "app", changed, b.Revert)
	if got := k.secretData(t, ns, "app"); got != nil {
		t.Errorf("after the revert the Secret still exists: %v", got)
	}
	revert(t, p, helm.Secret, "app", changed, b.Revert)
}

// TestSecretExistingRestored: a Secret that existed is kept as
// <name>.migrate-orig; the revert restores it exactly (keys the step added
// are gone) and deletes the copy; a second revert changes nothing.
func TestSecretExistingRestored(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "secold")
	ctx := context.Background()
	orig := map[string]string{"token": "original-9f2d", "extra": "kept-by-someone"}
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Labels: map[string]string{"app": "db"}}, StringData: orig}
	if _, err := k.client.CoreV1().Secrets(ns).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := secretCfg(ns, "db", map[string]string{"token": "new-4a1b", "added": "added-value"}, nil)
	r := mustPlan(t, p, helm.Secret, "db", cfg)
	contains(t, "the plan", r.Diff, "~ Secret "+ns+"/db (keys changed: added, token)", "keeps a copy as "+ns+"/db.migrate-orig")

	a := mustApply(t, p, helm.Secret, "db", cfg, nil)
	contains(t, "the revert data", a.Revert.Description, "restore Secret "+ns+"/db from its copy db.migrate-orig")
	sameData(t, "the copy", k.secretData(t, ns, "db.migrate-orig"), orig)
	sameData(t, "the Secret", k.secretData(t, ns, "db"), map[string]string{"token": "new-4a1b", "added": "added-value", "extra": "kept-by-someone"})
	if strings.Contains(string(a.Revert.Data), "original-9f2d") {
		t.Errorf("the revert data holds the previous value: %s", a.Revert.Data)
	}
	// Applied again (an interrupted run): the copy stays the original.
	b := mustApply(t, p, helm.Secret, "db", cfg, nil)
	sameData(t, "the copy after a second apply", k.secretData(t, ns, "db.migrate-orig"), orig)

	for range 2 {
		revert(t, p, helm.Secret, "db", cfg, b.Revert)
		sameData(t, "the restored Secret", k.secretData(t, ns, "db"), orig)
		if got := k.secretData(t, ns, "db.migrate-orig"); got != nil {
			t.Errorf("the copy is still there after the revert")
		}
	}
	live, err := k.client.CoreV1().Secrets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil || live.Labels["app"] != "db" {
		t.Errorf("the restored Secret lost its labels: %v %v", err, live)
	}
}

// TestSecretAgeFile: a key from an age-encrypted file is decrypted with
// MIGRATE_AGE_IDENTITY; the clear value is in the cluster only.
func TestSecretAgeFile(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "secage")
	const key = "ed25519 a_signing_key_3e9c0b\n"
	path := ageFile(t, "signing.key.age", key)
	plainPath := filepath.Join(t.TempDir(), "plain.txt")
	if err := os.WriteFile(plainPath, []byte("plain-file-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := secretCfg(ns, "synapse-signing-key", nil, map[string]string{"signing.key": path, "plain": plainPath})
	r := mustPlan(t, p, helm.Secret, "signing", cfg)
	contains(t, "the plan", r.Diff, "+ Secret "+ns+"/synapse-signing-key (keys: plain, signing.key)")
	var log bytes.Buffer
	a := apply(t, p, helm.Secret, "signing", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	sameData(t, "the Secret", k.secretData(t, ns, "synapse-signing-key"), map[string]string{"signing.key": key, "plain": "plain-file-value"})
	for _, text := range []string{r.Diff, log.String(), string(a.Revert.Data), a.Outputs.GoString()} {
		if strings.Contains(text, "a_signing_key_3e9c0b") {
			t.Errorf("the decrypted key shows in %q", text)
		}
	}
	revert(t, p, helm.Secret, "signing", cfg, a.Revert)
}

// TestSecretAgeFileWithoutIdentity: without the identity the plan fails
// naming the step, the key and what to set.
func TestSecretAgeFileWithoutIdentity(t *testing.T) {
	path := ageFile(t, "k.age", "value-without-identity")
	t.Setenv(providers.AgeIdentityEnv, "")
	k := lab(t)
	p := k.provider(t, nil)
	r := plan(t, p, helm.Secret, "noid", secretCfg("default", "noid", nil, map[string]string{"k": path}))
	if !r.Diagnostics.HasErrors() {
		t.Fatal("the plan of an age file without identity succeeded")
	}
	contains(t, "the error", r.Diagnostics.Err().Error(), "kubernetes_secret.noid", `key "k"`, "is age-encrypted", "MIGRATE_AGE_IDENTITY")
}

// TestSecretFileWrittenByAnEarlierStep: a file not there yet is an error,
// unless a step this one depends on changes first (it pulls the key): then
// the Secret is planned and the file read when the step runs.
func TestSecretFileWrittenByAnEarlierStep(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	missing := filepath.Join(t.TempDir(), "signing.key.age")
	cfg := secretCfg("default", "later", nil, map[string]string{"signing.key": missing})
	if r := plan(t, p, helm.Secret, "later", cfg); !r.Diagnostics.HasErrors() {
		t.Errorf("a missing file with nothing to write it planned: %q", r.Diff)
	}
	r := p.Plan(context.Background(), providers.PlanRequest{Type: helm.Secret, Addr: addr(helm.Secret, "later"), Config: cfg, Action: providers.Create, AfterChanges: true})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("after a change that writes it: %v", err)
	}
	contains(t, "the plan", r.Diff, "signing.key ("+missing+"), written by a step this one depends on", "+ Secret default/later (keys: signing.key)")
}
