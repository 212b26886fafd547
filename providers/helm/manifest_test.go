package helm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// yamlFile writes a manifest file and returns its path.
func yamlFile(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func manifestCfg(files []string, objects []cty.Value, extra map[string]cty.Value) cty.Value {
	attrs := map[string]cty.Value{}
	if files != nil {
		var fs []cty.Value
		for _, f := range files {
			fs = append(fs, str(f))
		}
		attrs["files"] = cty.ListVal(fs)
	}
	if objects != nil {
		attrs["objects"] = cty.TupleVal(objects)
	}
	for k, v := range extra {
		attrs[k] = v
	}
	return obj(attrs)
}

// configMap is a ConfigMap as an HCL object.
func configMap(ns, name string, data map[string]string) cty.Value {
	md := map[string]cty.Value{"name": str(name)}
	if ns != "" {
		md["namespace"] = str(ns)
	}
	return obj(map[string]cty.Value{"apiVersion": str("v1"), "kind": str("ConfigMap"), "metadata": obj(md), "data": obj(strObj(data))})
}

func strObj(m map[string]string) map[string]cty.Value {
	out := map[string]cty.Value{}
	for k, v := range m {
		out[k] = str(v)
	}
	return out
}

func (k *kube) configMapData(t testing.TB, ns, name string) map[string]string {
	t.Helper()
	cm, err := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

const manifestSecretYAML = `# the app's objects
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: %s
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: %s
`

// TestManifestCreateChangeRevert: YAML documents and HCL objects are
// planned as "+", applied with server-side apply, planned again as
// unchanged, changed (the diff shows the ConfigMap's change and the
// Secret's only as fingerprints), and the revert deletes what the step
// created, twice without error.
func TestManifestCreateChangeRevert(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "man")
	const pw1, pw2 = "manifest-password-5d1e", "manifest-password-8c2f"
	file := yamlFile(t, fmt.Sprintf(manifestSecretYAML, "fast", pw1))
	cfg := manifestCfg([]string{file}, []cty.Value{configMap("", "extra", map[string]string{"k": "v"})}, map[string]cty.Value{"namespace": str(ns)})

	r := mustPlan(t, p, helm.Manifest, "app", cfg)
	contains(t, "the plan", r.Diff, "+ ConfigMap "+ns+"/settings", "+ ConfigMap "+ns+"/extra", "+ Secret "+ns+"/creds", "objects: 3 to add, 0 to change, 0 unchanged")
	var log bytes.Buffer
	a := apply(t, p, helm.Manifest, "app", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	if got := k.configMapData(t, ns, "settings"); got["mode"] != "fast" {
		t.Errorf("ConfigMap settings: %v", got)
	}
	if got := k.secretData(t, ns, "creds"); got["password"] != pw1 {
		t.Error("the Secret does not hold the password")
	}
	want := fmt.Sprintf(`["ConfigMap/%[1]s/settings" "Secret/%[1]s/creds" "ConfigMap/%[1]s/extra"]`, ns)
	var outs []string
	for _, v := range a.Outputs.GetAttr("objects").AsValueSlice() {
		outs = append(outs, v.AsString())
	}
	if got := fmt.Sprintf("%q", outs); got != want {
		t.Errorf("objects output %s, want %s", got, want)
	}
	cm, _ := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), "settings", metav1.GetOptions{})
	if !strings.Contains(fmt.Sprint(cm.ManagedFields), "migrate") {
		t.Errorf("the ConfigMap is not managed by migrate: %v", cm.ManagedFields)
	}

	r = mustPlan(t, p, helm.Manifest, "app", cfg)
	contains(t, "the plan again", r.Diff, "objects: 0 to add, 0 to change, 3 unchanged")
	if strings.Contains(r.Diff, "~ ") || strings.Contains(r.Diff, "+ ") {
		t.Errorf("the plan of an applied step shows changes:\n%s", r.Diff)
	}
	if rr := read(t, p, helm.Manifest, "app", cfg, priorOf(a)); rr.Observation != providers.Present {
		t.Errorf("Read after apply: %v %s", rr.Observation, rr.Detail)
	}

	edited, _ := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), "extra", metav1.GetOptions{})
	edited.Data["k"] = "edited-by-hand"
	edited, err := k.client.CoreV1().ConfigMaps(ns).Update(context.Background(), edited, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
	if err != nil {
		t.Fatal(err)
	}
	rr := read(t, p, helm.Manifest, "app", cfg, priorOf(a))
	if rr.Observation != providers.Drifted || !strings.Contains(rr.Detail, "changed outside migrate: ConfigMap "+ns+"/extra") {
		t.Errorf("Read after an edit by hand: %v %s", rr.Observation, rr.Detail)
	}
	edited.Data["k"] = "v"
	if _, err := k.client.CoreV1().ConfigMaps(ns).Update(context.Background(), edited, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}

	file2 := yamlFile(t, fmt.Sprintf(manifestSecretYAML, "slow", pw2))
	changed := manifestCfg([]string{file2}, []cty.Value{configMap("", "extra", map[string]string{"k": "v"})}, map[string]cty.Value{"namespace": str(ns)})
	r = mustPlan(t, p, helm.Manifest, "app", changed)
	contains(t, "the plan of a change", r.Diff, "objects: 0 to add, 2 to change, 1 unchanged", "~ ConfigMap "+ns+"/settings", "-  mode: fast", "+  mode: slow", "~ Secret "+ns+"/creds", "(sensitive value) #")
	for _, pw := range []string{pw1, pw2} {
		if strings.Contains(r.Diff, pw) {
			t.Errorf("the plan shows a password:\n%s", r.Diff)
		}
	}
	b := mustApply(t, p, helm.Manifest, "app", changed, priorOf(a))
	if got := k.configMapData(t, ns, "settings"); got["mode"] != "slow" {
		t.Errorf("ConfigMap settings after the change: %v", got)
	}
	for _, text := range []string{string(b.Revert.Data), b.Revert.Description} {
		if strings.Contains(text, pw1) || strings.Contains(text, pw2) {
			t.Errorf("the revert data shows a password: %s", text)
		}
	}
	for range 2 {
		revert(t, p, helm.Manifest, "app", changed, b.Revert)
		for _, name := range []string{"settings", "extra"} {
			if got := k.configMapData(t, ns, name); got != nil {
				t.Errorf("ConfigMap %s is still there after the revert", name)
			}
		}
		if got := k.secretData(t, ns, "creds"); got != nil {
			t.Error("the Secret is still there after the revert")
		}
	}
}

// TestManifestExistingRestoredAndConflict: an object that existed is
// applied again as it was by the revert (fields the step added are gone);
// a field another manager owns is a conflict naming the manager and field.
func TestManifestExistingRestoredAndConflict(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "manold")
	ctx := context.Background()
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, Labels: map[string]string{"team": "media"}}, Data: map[string]string{"owned": "by-someone"}}
	if _, err := k.client.CoreV1().ConfigMaps(ns).Create(ctx, old, metav1.CreateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}

	conflict := manifestCfg(nil, []cty.Value{configMap(ns, "app", map[string]string{"owned": "by-migrate"})}, nil)
	r := plan(t, p, helm.Manifest, "conflict", conflict)
	if !r.Diagnostics.HasErrors() {
		t.Fatalf("the plan of a conflicting change succeeded:\n%s", r.Diff)
	}
	contains(t, "the conflict", r.Diagnostics.Err().Error(), "kubernetes_manifest.conflict", "ConfigMap "+ns+"/app", ".data.owned", `"someone-else"`, "--force-conflicts")
	ap := apply(t, p, helm.Manifest, "conflict", conflict, nil, nil)
	if !ap.Diagnostics.HasErrors() || k.configMapData(t, ns, "app")["owned"] != "by-someone" {
		t.Fatalf("the apply of a conflicting change did not fail: %v %v", ap.Diagnostics.Err(), k.configMapData(t, ns, "app"))
	}

	cfg := manifestCfg(nil, []cty.Value{configMap(ns, "app", map[string]string{"added": "by-migrate"})}, nil)
	r = mustPlan(t, p, helm.Manifest, "add", cfg)
	contains(t, "the plan", r.Diff, "~ ConfigMap "+ns+"/app", "+  added: by-migrate")
	a := mustApply(t, p, helm.Manifest, "add", cfg, nil)
	if got := k.configMapData(t, ns, "app"); got["added"] != "by-migrate" || got["owned"] != "by-someone" {
		t.Errorf("after the apply: %v", got)
	}
	// The ConfigMap as it was is kept in a Secret beside it, not in the
	// state: its data is often a configuration file with a password.
	if rd, err := json.Marshal(a.Revert); err != nil || strings.Contains(string(rd), "by-someone") || !strings.Contains(string(rd), "app.configmap.migrate-orig") {
		t.Errorf("the revert data holds the replaced ConfigMap's data, or names no copy: %s", rd)
	}
	if cp, err := k.client.CoreV1().Secrets(ns).Get(ctx, "app.configmap.migrate-orig", metav1.GetOptions{}); err != nil || !strings.Contains(string(cp.Data["configmap.json"]), "by-someone") {
		t.Fatalf("the copy of the ConfigMap: %v %v", cp, err)
	}
	for range 2 {
		revert(t, p, helm.Manifest, "add", cfg, a.Revert)
		cm, err := k.client.CoreV1().ConfigMaps(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the revert deleted an object the step did not create: %v", err)
		}
		if len(cm.Data) != 1 || cm.Data["owned"] != "by-someone" || cm.Labels["team"] != "media" {
			t.Errorf("after the revert: data %v labels %v", cm.Data, cm.Labels)
		}
		if _, err := k.client.CoreV1().Secrets(ns).Get(ctx, "app.configmap.migrate-orig", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the copy is still there after the revert: %v", err)
		}
	}
}

// TestManifestWaitForBound: a hostPath PersistentVolume and a claim of
// its storage class, waited for until Bound (the controller manager binds
// them); a claim no volume matches times out with what it shows.
func TestManifestWaitForBound(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "manpvc")
	class := fmt.Sprintf("manual-%06d", rand.IntN(1000000))
	pvName := "pv-" + class
	t.Cleanup(func() {
		k.client.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	file := yamlFile(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata:
  name: %[1]s
spec:
  storageClassName: %[2]s
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/%[1]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  storageClassName: %[2]s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`, pvName, class))
	cfg := manifestCfg([]string{file}, nil, map[string]cty.Value{"namespace": str(ns), "wait_for": str("Bound"), "wait_timeout": str("3m")})
	var log bytes.Buffer
	start := time.Now()
	a := apply(t, p, helm.Manifest, "pvc", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log.String())
	}
	pvc, err := k.client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("after the wait the claim is not Bound: %v %v", err, pvc.Status)
	}
	t.Logf("bound in %s", time.Since(start))
	contains(t, "the log", log.String(), "PersistentVolumeClaim "+ns+"/data is Bound")

	unbound := manifestCfg(nil, []cty.Value{obj(map[string]cty.Value{
		"apiVersion": str("v1"), "kind": str("PersistentVolumeClaim"),
		"metadata": obj(map[string]cty.Value{"name": str("orphan"), "namespace": str(ns)}),
		"spec": obj(map[string]cty.Value{
			"storageClassName": str(class + "-none"), "accessModes": cty.TupleVal([]cty.Value{str("ReadWriteOnce")}),
			"resources": obj(map[string]cty.Value{"requests": obj(map[string]cty.Value{"storage": str("1Gi")})}),
		}),
	})}, map[string]cty.Value{"wait_for": str("Bound"), "wait_timeout": str("3s")})
	b := apply(t, p, helm.Manifest, "orphan", unbound, nil, nil)
	if !b.Diagnostics.HasErrors() {
		t.Fatal("the wait for a claim no volume matches succeeded")
	}
	contains(t, "the timeout", b.Diagnostics.Err().Error(), "kubernetes_manifest.orphan", "PersistentVolumeClaim "+ns+"/orphan did not become Bound within wait_timeout (3s)", "status.phase is Pending")
	if b.Revert == nil {
		t.Fatal("a timed-out apply returned no revert data: the claim it created would stay")
	}
	revert(t, p, helm.Manifest, "orphan", unbound, b.Revert)
	revert(t, p, helm.Manifest, "pvc", cfg, a.Revert)
	// Deleted, maybe still held by its protection finalizer. (One read:
	// a second one could find it gone, and client-go then returns an
	// empty object, not nil.)
	if pvc, err := k.client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "orphan", metav1.GetOptions{}); err == nil && pvc.DeletionTimestamp == nil {
		t.Error("the revert left the claim")
	}
}

// TestManifestCRD: a CRD waited for until Established; then a custom
// resource of it, in a later step, is mapped (discovery is read again);
// before, its kind is refused naming the document and what to do.
func TestManifestCRD(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "mancrd")
	group := fmt.Sprintf("g%06d.migrate.test", rand.IntN(1000000))
	cr := yamlFile(t, fmt.Sprintf("---\n# empty document above\napiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n", group))
	crCfg := manifestCfg([]string{cr}, nil, map[string]cty.Value{"namespace": str(ns)})
	r := plan(t, p, helm.Manifest, "widget", crCfg)
	if !r.Diagnostics.HasErrors() {
		t.Fatalf("the plan of an unknown kind succeeded:\n%s", r.Diff)
	}
	contains(t, "the error", r.Diagnostics.Err().Error(), cr+", document 1 (line 2)", "Widget", group+"/v1", "install its CustomResourceDefinition first")

	crd := yamlFile(t, fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, group))
	crdCfg := manifestCfg([]string{crd}, nil, map[string]cty.Value{"wait_for": str("Established"), "wait_timeout": str("2m")})
	a := mustApply(t, p, helm.Manifest, "crd", crdCfg, nil)
	r = mustPlan(t, p, helm.Manifest, "widget", crCfg)
	contains(t, "the plan after the CRD", r.Diff, "+ Widget "+ns+"/w1")
	w := mustApply(t, p, helm.Manifest, "widget", crCfg, nil)
	revert(t, p, helm.Manifest, "widget", crCfg, w.Revert)
	revert(t, p, helm.Manifest, "crd", crdCfg, a.Revert)
	revert(t, p, helm.Manifest, "crd", crdCfg, a.Revert)
}

// TestManifestPodSecurity: a Deployment with a hostPath volume in a
// baseline namespace fails the plan (the API server would accept it, and
// its ReplicaSet then create no pod), naming the object and the check.
func TestManifestPodSecurity(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "manpss")
	base := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := k.client.CoreV1().Namespaces().Create(context.Background(), base, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	file := yamlFile(t, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: jellyfin
spec:
  selector: {matchLabels: {app: jellyfin}}
  template:
    metadata: {labels: {app: jellyfin}}
    spec:
      containers:
      - name: jellyfin
        image: jellyfin/jellyfin:10
      volumes:
      - name: media
        hostPath: {path: /tank/media}
`)
	cfg := manifestCfg([]string{file}, nil, map[string]cty.Value{"namespace": str(ns)})
	for _, what := range []string{"plan", "apply"} {
		var d error
		if what == "plan" {
			d = plan(t, p, helm.Manifest, "media", cfg).Diagnostics.Err()
		} else {
			d = apply(t, p, helm.Manifest, "media", cfg, nil, nil).Diagnostics.Err()
		}
		if d == nil {
			t.Fatalf("the %s of a hostPath Deployment in a baseline namespace succeeded", what)
		}
		contains(t, "the "+what+" error", d.Error(), "PodSecurity Violation", "kubernetes_manifest.media", "Deployment "+ns+"/jellyfin", "hostPath volumes", `"baseline"`, `pod_security = "privileged"`)
	}
	if _, err := k.client.AppsV1().Deployments(ns).Get(context.Background(), "jellyfin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment was created: %v", err)
	}
}

// TestManifestBadInput: invalid YAML names the file and line, an object
// without a name names its document, a step without objects says what to
// set; none panics.
func TestManifestBadInput(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	bad := yamlFile(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n")
	noName := yamlFile(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n")
	for _, c := range []struct {
		name string
		cfg  cty.Value
		want []string
	}{
		{"yaml", manifestCfg([]string{bad}, nil, nil), []string{"Invalid YAML", bad + ", the document at line 6", "line 9"}},
		{"noname", manifestCfg([]string{noName}, nil, nil), []string{"Object Without a Name", noName + ", document 1 (line 1)", "metadata.name"}},
		{"empty", manifestCfg(nil, nil, nil), []string{"No Objects", "kubernetes_manifest.empty", "files", "objects"}},
		{"notalist", manifestCfg(nil, nil, map[string]cty.Value{"objects": str("x")}), []string{"must be a list of objects"}},
		{"missing", manifestCfg([]string{"nope.yaml"}, nil, nil), []string{"Cannot Read Manifest", "nope.yaml"}},
	} {
		r := plan(t, p, helm.Manifest, c.name, c.cfg)
		if !r.Diagnostics.HasErrors() {
			t.Errorf("%s: the plan succeeded:\n%s", c.name, r.Diff)
			continue
		}
		contains(t, c.name, r.Diagnostics.Err().Error(), c.want...)
	}
}

// TestManifestResumed: an apply interrupted after its objects were
// created and run again (no prior in the state) still undoes by deleting
// them: they carry the step's mark. Read says the same on resume.
func TestManifestResumed(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "manres")
	cfg := manifestCfg(nil, []cty.Value{configMap(ns, "made", map[string]string{"k": "v"})}, nil)
	mustApply(t, p, helm.Manifest, "res", cfg, nil)
	rr := read(t, p, helm.Manifest, "res", cfg, nil)
	again := mustApply(t, p, helm.Manifest, "res", cfg, nil)
	for what, inv := range map[string]*providers.RevertData{"the second apply": again.Revert, "the read": rr.Revert} {
		if inv == nil || !strings.Contains(string(inv.Data), `"delete":true`) {
			t.Errorf("%s does not delete the object it created: %+v", what, inv)
		}
	}
	revert(t, p, helm.Manifest, "res", cfg, again.Revert)
	if k.configMapData(t, ns, "made") != nil {
		t.Error("the revert left the object")
	}
}

// TestManifestExistingSecret: a Secret that existed and that the step
// changes is irreversible, said by the plan; its data is not kept in the
// revert data, and the revert leaves it (it does not delete it).
func TestManifestExistingSecret(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "mansec")
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, StringData: map[string]string{"old": "old-secret-4b1d"}}
	if _, err := k.client.CoreV1().Secrets(ns).Create(context.Background(), old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	file := yamlFile(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  new: new-secret-77c0\n")
	cfg := manifestCfg([]string{file}, nil, map[string]cty.Value{"namespace": str(ns)})
	r := mustPlan(t, p, helm.Manifest, "sec", cfg)
	contains(t, "the irreversible reason", r.Irreversible, "rollback cannot restore the data of Secret "+ns+"/db")
	a := mustApply(t, p, helm.Manifest, "sec", cfg, nil)
	for _, text := range []string{r.Diff, string(a.Revert.Data)} {
		if strings.Contains(text, "old-secret-4b1d") || strings.Contains(text, "new-secret-77c0") {
			t.Errorf("a value shows: %s", text)
		}
	}
	revert(t, p, helm.Manifest, "sec", cfg, a.Revert)
	if got := k.secretData(t, ns, "db"); got["old"] != "old-secret-4b1d" {
		t.Errorf("the revert removed the Secret that existed: %v", got != nil)
	}
}

// TestManifestPlanBeforeCluster: with a kubeconfig an earlier step writes,
// the plan lists the objects as to add, marked deferred, and checks their
// pod templates all the same.
func TestManifestPlanBeforeCluster(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	later := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := manifestCfg(nil, []cty.Value{configMap("media", "settings", map[string]string{"k": "v"})}, map[string]cty.Value{"kubeconfig": str(later)})
	r := mustPlan(t, p, helm.Manifest, "early", cfg)
	contains(t, "the plan", r.Diff, "(known after apply)", "+ ConfigMap media/settings")
	sec := mustPlan(t, p, helm.Secret, "early", obj(map[string]cty.Value{"name": str("s"), "namespace": str("media"), "data": strMap(map[string]string{"k": "v"}), "kubeconfig": str(later)}))
	contains(t, "the Secret's plan", sec.Diff, "(known after apply)", "+ Secret media/s (keys: k)")
}

// TestManifestCRDAndResource: a CRD and a resource of its kind in one
// step: planned as two objects to add, the CRD applied and Established
// before the resource, both deleted by the revert.
func TestManifestCRDAndResource(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "mancrd2")
	group := fmt.Sprintf("h%06d.migrate.test", rand.IntN(1000000))
	file := yamlFile(t, fmt.Sprintf(`apiVersion: %[1]s/v1
kind: Gadget
metadata:
  name: g1
spec:
  size: 2
status:  # no status subresource: written as it is
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`, group))
	cfg := manifestCfg([]string{file}, nil, map[string]cty.Value{"namespace": str(ns), "wait_for": str("Ready"), "wait_timeout": str("1m")})
	r := mustPlan(t, p, helm.Manifest, "gadgets", cfg)
	contains(t, "the plan", r.Diff, "+ CustomResourceDefinition gadgets."+group, "+ Gadget "+ns+"/g1", "objects: 2 to add")
	a := mustApply(t, p, helm.Manifest, "gadgets", cfg, nil)
	var outs []string
	for _, v := range a.Outputs.GetAttr("objects").AsValueSlice() {
		outs = append(outs, v.AsString())
	}
	if got, want := strings.Join(outs, " "), "CustomResourceDefinition/gadgets."+group+" Gadget/"+ns+"/g1"; got != want {
		t.Errorf("objects %s, want %s", got, want)
	}
	if rr := read(t, p, helm.Manifest, "gadgets", cfg, priorOf(a)); rr.Observation != providers.Present {
		t.Errorf("Read after apply: %v %s", rr.Observation, rr.Detail)
	}
	// A condition Failed=True ends the wait at once, with its reason.
	broken := manifestCfg(nil, []cty.Value{obj(map[string]cty.Value{
		"apiVersion": str(group + "/v1"), "kind": str("Gadget"),
		"metadata": obj(map[string]cty.Value{"name": str("g2"), "namespace": str(ns)}),
		"status": obj(map[string]cty.Value{"conditions": cty.TupleVal([]cty.Value{obj(map[string]cty.Value{
			"type": str("Failed"), "status": str("True"), "reason": str("BackoffLimitExceeded"), "message": str("Job has reached the specified backoff limit"),
		})})}),
	})}, map[string]cty.Value{"wait_for": str("Complete")})
	start := time.Now()
	b := apply(t, p, helm.Manifest, "broken", broken, nil, nil)
	if !b.Diagnostics.HasErrors() || time.Since(start) > 30*time.Second {
		t.Fatalf("the wait for a failed object: %v after %s", b.Diagnostics.Err(), time.Since(start))
	}
	contains(t, "the failure", b.Diagnostics.Err().Error(), "Gadget "+ns+"/g2 failed instead of becoming Complete: BackoffLimitExceeded: Job has reached the specified backoff limit")
	revert(t, p, helm.Manifest, "broken", broken, b.Revert)
	revert(t, p, helm.Manifest, "gadgets", cfg, a.Revert)
	revert(t, p, helm.Manifest, "gadgets", cfg, a.Revert)
	raw, err := k.client.Discovery().RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets." + group).DoRaw(context.Background())
	if err == nil && !strings.Contains(string(raw), "deletionTimestamp") {
		t.Errorf("the revert left the CRD: %s", raw)
	}
}

// TestFilesJoinInputDigest: a changed file (a manifest, or a Secret's age
// file) changes the step's input digest, so the plan says update.
func TestFilesJoinInputDigest(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	file := yamlFile(t, fmt.Sprintf(manifestSecretYAML, "a", "b"))
	key := ageFile(t, "k.age", "digest-value-one")
	for _, c := range []struct {
		typ  string
		cfg  cty.Value
		path string
		next []byte
	}{
		{helm.Manifest, manifestCfg([]string{file}, nil, nil), file, []byte(fmt.Sprintf(manifestSecretYAML, "a", "c"))},
		{helm.Secret, secretCfg("default", "k", nil, map[string]string{"k": key}), key, nil},
	} {
		digest := func() string {
			r := p.InputDigest(context.Background(), providers.DigestRequest{Type: c.typ, Addr: addr(c.typ, "d"), Config: c.cfg})
			if err := r.Diagnostics.Err(); err != nil || r.Digest == "" {
				t.Fatalf("%s: InputDigest %q: %v", c.typ, r.Digest, err)
			}
			return r.Digest
		}
		before := digest()
		next := c.next
		if next == nil {
			next, _ = os.ReadFile(ageFile(t, "k2.age", "digest-value-two"))
		}
		if err := os.WriteFile(c.path, next, 0o600); err != nil {
			t.Fatal(err)
		}
		if digest() == before {
			t.Errorf("%s: the digest did not change with the file", c.typ)
		}
	}
}

// TestManifestWaitForAvailableAndComplete: against the test cluster's
// scheduler and kwok node, a Deployment's pods become ready and a Job's
// complete, so wait_for "Available" and "Complete" end when the real
// controllers say so.
func TestManifestWaitForAvailableAndComplete(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.createNamespace(t, "manwait")
	deployment := yamlFile(t, `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: busybox:1.36}]
`)
	job := yamlFile(t, `apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: once, image: busybox:1.36, command: ["true"]}]
`)
	for _, c := range []struct{ file, cond, want string }{
		{deployment, "Available", "Deployment " + ns + "/web is Available"},
		{job, "Complete", "Job " + ns + "/once is Complete"},
	} {
		var log bytes.Buffer
		cfg := manifestCfg([]string{c.file}, nil, map[string]cty.Value{"namespace": str(ns), "wait_for": str(c.cond), "wait_timeout": str("3m")})
		a := apply(t, p, helm.Manifest, "w"+strings.ToLower(c.cond), cfg, nil, &log)
		if err := a.Diagnostics.Err(); err != nil {
			t.Fatalf("wait_for %s: %v\n%s", c.cond, err, log.String())
		}
		contains(t, "the log of wait_for "+c.cond, log.String(), c.want)
	}
	d, err := k.client.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || d.Status.AvailableReplicas != 2 {
		t.Errorf("after wait_for Available: %v, %d available", err, d.Status.AvailableReplicas)
	}

	// A condition the Job never reports is refused by the plan, not
	// waited out.
	both := manifestCfg([]string{deployment, job}, nil, map[string]cty.Value{"namespace": str(ns), "wait_for": str("Available")})
	r := plan(t, p, helm.Manifest, "both", both)
	if !r.Diagnostics.HasErrors() {
		t.Fatalf("wait_for Available over a Job planned: %q", r.Diff)
	}
	contains(t, "the error", r.Diagnostics.Err().Error(), "Invalid Wait Condition", `"Available"`, "Job once never reports it", "Complete")
}
