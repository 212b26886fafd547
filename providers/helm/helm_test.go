package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

func hostPathPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostpath", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes:    []corev1.Volume{{Name: "tank", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tank"}}}},
		},
	}
}

// waitSA waits for the default ServiceAccount, without which every Pod
// is refused.
func (k *kube) waitSA(t *testing.T, ns string) {
	t.Helper()
	for range 100 {
		if _, err := k.client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{}); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no default ServiceAccount in %s: is kube-controller-manager running (scripts/kube-up.sh)?", ns)
}

// TestNamespaceLevels: the labels are written, and the API server then
// rejects a hostPath Pod in a baseline namespace and accepts it in a
// privileged one, agreeing with the preflight.
func TestNamespaceLevels(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	base, priv := k.namespace(t, "base"), k.namespace(t, "priv")

	for _, c := range []struct{ ns, level string }{{base, "baseline"}, {priv, "privileged"}} {
		cfg := obj(map[string]cty.Value{"name": str(c.ns), "pod_security": str(c.level), "labels": strMap(map[string]string{"team": "media"})})
		r := mustPlan(t, p, helm.Namespace, c.ns, cfg)
		contains(t, "the plan", r.Diff, "+ namespace "+c.ns, "pod-security.kubernetes.io/enforce = \""+c.level+"\"", "namespace "+c.ns+": PodSecurity "+c.level)
		a := mustApply(t, p, helm.Namespace, c.ns, cfg, nil)
		contains(t, "the revert data", a.Revert.Description, "delete namespace "+c.ns)
		live, err := k.client.CoreV1().Namespaces().Get(context.Background(), c.ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"enforce", "audit", "warn"} {
			if got := live.Labels["pod-security.kubernetes.io/"+mode]; got != c.level {
				t.Errorf("%s: label %s = %q, want %q", c.ns, mode, got, c.level)
			}
			if got := live.Labels["pod-security.kubernetes.io/"+mode+"-version"]; got != "latest" {
				t.Errorf("%s: label %s-version = %q, want latest", c.ns, mode, got)
			}
		}
		if live.Labels["team"] != "media" {
			t.Errorf("%s: label team = %q", c.ns, live.Labels["team"])
		}
		if rr := read(t, p, helm.Namespace, c.ns, cfg, priorOf(a)); rr.Observation != providers.Present {
			t.Errorf("Read after apply: %v %s", rr.Observation, rr.Detail)
		}
	}

	k.waitSA(t, base)
	k.waitSA(t, priv)
	_, err := k.client.CoreV1().Pods(base).Create(context.Background(), hostPathPod(base), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("hostPath Pod in a baseline namespace: err = %v, want a PodSecurity rejection", err)
	}
	if _, err := k.client.CoreV1().Pods(priv).Create(context.Background(), hostPathPod(priv), metav1.CreateOptions{}); err != nil {
		t.Errorf("hostPath Pod in a privileged namespace refused: %v", err)
	}

	// Drift: someone relabels the namespace.
	cfg := obj(map[string]cty.Value{"name": str(priv), "pod_security": str("privileged")})
	live, _ := k.client.CoreV1().Namespaces().Get(context.Background(), priv, metav1.GetOptions{})
	live.Labels["pod-security.kubernetes.io/enforce"] = "baseline"
	if _, err := k.client.CoreV1().Namespaces().Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rr := read(t, p, helm.Namespace, priv, cfg, &providers.Prior{}); rr.Observation != providers.Drifted || !strings.Contains(rr.Detail, "enforce") {
		t.Errorf("Read after a relabel: %v %q, want drifted", rr.Observation, rr.Detail)
	}
}

// TestNamespaceExisting: a namespace the step did not create is never
// deleted: rollback restores the labels it had.
func TestNamespaceExisting(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "exist")
	_, err := k.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"owner": "someone", "pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := obj(map[string]cty.Value{"name": str(ns), "pod_security": str("privileged"), "annotations": strMap(map[string]string{"note": "media"})})
	r := mustPlan(t, p, helm.Namespace, "x", cfg)
	contains(t, "the plan", r.Diff, "~ namespace "+ns, `~ label pod-security.kubernetes.io/enforce = "restricted" -> "privileged"`, `+ annotation note = "media"`)
	a := mustApply(t, p, helm.Namespace, "x", cfg, nil)
	contains(t, "the revert data", a.Revert.Description, "restore the labels")
	revert(t, p, helm.Namespace, "x", cfg, a.Revert)
	live, err := k.client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the namespace is gone after rollback: %v", err)
	}
	if live.DeletionTimestamp != nil {
		t.Fatal("rollback deleted a namespace the step did not create")
	}
	if got := live.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("enforce after rollback = %q, want restricted", got)
	}
	if _, ok := live.Labels["pod-security.kubernetes.io/audit"]; ok {
		t.Error("the audit label the step added is still there")
	}
	if _, ok := live.Annotations["note"]; ok {
		t.Error("the annotation the step added is still there")
	}
	if live.Labels["owner"] != "someone" {
		t.Error("a label the step never touched was lost")
	}
}

func appRelease(ns string, values map[string]cty.Value) cty.Value {
	attrs := map[string]cty.Value{
		"name":             str("app"),
		"chart":            str("charts/app"),
		"namespace":        str(ns),
		"create_namespace": cty.True,
	}
	if values != nil {
		attrs["values"] = obj(values)
	}
	return obj(attrs)
}

// TestReleaseLifecycle: install, upgrade with the manifest diff, history
// and list as helm sees them, rollback to the previous revision, and the
// uninstall of what the step installed.
func TestReleaseLifecycle(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "life")

	v1 := appRelease(ns, map[string]cty.Value{"message": str("one"), "extra": cty.True})
	r := mustPlan(t, p, helm.Release, "app", v1)
	contains(t, "the install plan", r.Diff, "release "+ns+"/app: install chart app-0.1.0",
		"namespace "+ns+": PodSecurity baseline (the cluster default)",
		"objects: 5 to add, 0 to change, 0 to remove",
		"+ ConfigMap "+ns+"/app-config (added)", "+ Deployment "+ns+"/app (added)", "+ Service "+ns+"/app (added)", "+ Secret "+ns+"/app-secret (added)")
	a1 := mustApply(t, p, helm.Release, "app", v1, nil)
	contains(t, "the revert data", a1.Revert.Description, "uninstall release "+ns+"/app")
	if got := k.list(t, ns); fmt.Sprint(got) != "[app:1:deployed]" {
		t.Errorf("helm list = %v, want [app:1:deployed]", got)
	}
	if rr := read(t, p, helm.Release, "app", v1, priorOf(a1)); rr.Observation != providers.Present {
		t.Errorf("Read after install: %v %s", rr.Observation, rr.Detail)
	}

	// The upgrade changes the ConfigMap, removes the extra one.
	v2 := appRelease(ns, map[string]cty.Value{"message": str("two")})
	r = mustPlan(t, p, helm.Release, "app", v2)
	contains(t, "the upgrade plan", r.Diff, "upgrade revision 1 (app-0.1.0, deployed)",
		"objects: 0 to add, 1 to change, 1 to remove, 3 unchanged",
		"~ ConfigMap "+ns+"/app-config (changed)", `-  message: "one"`, `+  message: "two"`,
		"- ConfigMap "+ns+"/app-extra (removed)")
	if strings.Contains(r.Diff, "Deployment "+ns+"/app (changed)") {
		t.Errorf("the unchanged Deployment is shown as changed:\n%s", r.Diff)
	}
	a2 := mustApply(t, p, helm.Release, "app", v2, priorOf(a1))
	if got := k.history(t, ns, "app"); got != "1:superseded 2:deployed" {
		t.Errorf("helm history = %q", got)
	}
	// Applied again after an install: rollback still uninstalls.
	contains(t, "the revert data of the upgrade", a2.Revert.Description, "uninstall")
	// An upgrade by a step that did not install: its revert data rolls back.
	p2 := k.provider(t, nil)
	v3 := appRelease(ns, map[string]cty.Value{"message": str("three")})
	a3 := mustApply(t, p2, helm.Release, "app", v3, nil)
	contains(t, "the revert data of a plain upgrade", a3.Revert.Description, "roll release "+ns+"/app back to revision 2")

	// Someone upgrades behind our back: Read says drifted.
	p3 := k.provider(t, nil)
	mustApply(t, p3, helm.Release, "other", appRelease(ns, map[string]cty.Value{"message": str("hand")}), nil)
	if rr := read(t, p, helm.Release, "app", v3, priorOf(a3)); rr.Observation != providers.Drifted || !strings.Contains(rr.Detail, "migrate made revision 3: revision 4 was made outside migrate") {
		t.Errorf("Read after an upgrade by someone else: %v %q", rr.Observation, rr.Detail)
	}

	revert(t, p2, helm.Release, "app", v3, a3.Revert)
	if got := k.history(t, ns, "app"); got != "1:superseded 2:superseded 3:superseded 4:superseded 5:deployed" {
		t.Errorf("helm history after rollback = %q", got)
	}
	cm, err := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), "app-config", metav1.GetOptions{})
	if err != nil || cm.Data["message"] != "two" {
		t.Errorf("after rollback to revision 2 the ConfigMap says %v (%v), want two", cm.Data, err)
	}

	revert(t, p, helm.Release, "app", v1, a1.Revert)
	if got := k.list(t, ns); len(got) != 0 {
		t.Errorf("helm list after uninstall = %v", got)
	}
	if rr := read(t, p, helm.Release, "app", v1, priorOf(a1)); rr.Observation != providers.Absent {
		t.Errorf("Read after uninstall: %v", rr.Observation)
	}
}

// TestStuckRelease: a release left in pending-upgrade by a dead client is
// detected in plan and recovered in apply.
func TestStuckRelease(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "stuck")
	v1 := appRelease(ns, map[string]cty.Value{"message": str("one")})
	mustApply(t, p, helm.Release, "app", v1, nil)
	mustApply(t, p, helm.Release, "app", appRelease(ns, map[string]cty.Value{"message": str("two")}), nil)
	// The dead client: revision 2 pending-upgrade, revision 1 still
	// deployed, as helm upgrade leaves them mid-way.
	k.setStatus(t, ns, "app", 1, release.StatusDeployed)
	k.setStatus(t, ns, "app", 2, release.StatusPendingUpgrade)

	v3 := appRelease(ns, map[string]cty.Value{"message": str("three")})
	r := mustPlan(t, p, helm.Release, "app", v3)
	contains(t, "the plan", r.Diff, "stuck in pending-upgrade at revision 2", "roll it back to revision 1 (the last deployed), then upgrade")
	if rr := read(t, p, helm.Release, "app", v3, nil); rr.Observation != providers.Drifted || !strings.Contains(rr.Detail, "pending-upgrade") {
		t.Errorf("Read of a stuck release: %v %q", rr.Observation, rr.Detail)
	}
	var log bytes.Buffer
	a := apply(t, p, helm.Release, "app", v3, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply of a stuck release: %v\n%s", err, log.String())
	}
	contains(t, "the log", log.String(), "stuck in pending-upgrade")
	if got := k.history(t, ns, "app"); got != "1:superseded 2:failed 3:superseded 4:deployed" {
		t.Errorf("helm history = %q, want the stuck revision failed, the rollback (3) then the upgrade (4)", got)
	}
	cm, _ := k.client.CoreV1().ConfigMaps(ns).Get(context.Background(), "app-config", metav1.GetOptions{})
	if cm.Data["message"] != "three" {
		t.Errorf("ConfigMap after recovery = %v", cm.Data)
	}

	// pending-install with nothing ever deployed: uninstalled, then installed.
	ns2 := k.namespace(t, "stuck2")
	mustApply(t, p, helm.Release, "app", appRelease(ns2, nil), nil)
	k.setStatus(t, ns2, "app", 1, release.StatusPendingInstall)
	r = mustPlan(t, p, helm.Release, "app", appRelease(ns2, nil))
	contains(t, "the plan", r.Diff, "stuck in pending-install", "uninstall it (no earlier revision to go back to), then install")
	mustApply(t, p, helm.Release, "app", appRelease(ns2, nil), nil)
	if got := k.history(t, ns2, "app"); got != "1:deployed" {
		t.Errorf("helm history = %q, want a fresh install", got)
	}
}

// TestFailedRelease: a release whose last revision failed is upgraded.
func TestFailedRelease(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "failed")
	mustApply(t, p, helm.Release, "app", appRelease(ns, nil), nil)
	k.setStatus(t, ns, "app", 1, release.StatusFailed)
	v := appRelease(ns, map[string]cty.Value{"message": str("fixed")})
	r := mustPlan(t, p, helm.Release, "app", v)
	contains(t, "the plan", r.Diff, "revision 1 failed: apply upgrades it")
	mustApply(t, p, helm.Release, "app", v, nil)
	if got := k.history(t, ns, "app"); got != "1:superseded 2:deployed" {
		t.Errorf("helm history = %q", got)
	}
}

// TestPreflight: hostPath, /dev/dri and privileged fail the plan in a
// baseline namespace, before anything is applied, and pass once a
// kubernetes_namespace step planned first labels the namespace privileged.
func TestPreflight(t *testing.T) {
	t.Parallel()
	k := lab(t)
	for _, c := range []struct {
		chart, object, container string
		checks                   []string
		// install: kube-up.sh runs kube-apiserver without
		// --allow-privileged, so a privileged container is refused
		// whatever the namespace's level.
		install bool
	}{
		{"media", "Deployment", "jellyfin", []string{"hostPath", "dri"}, true},
		{"ci-runner", "StatefulSet", "dind", []string{"privileged"}, false},
	} {
		t.Run(c.chart, func(t *testing.T) {
			t.Parallel()
			p := k.provider(t, nil)
			ns := k.namespace(t, c.chart)
			rel := obj(map[string]cty.Value{"chart": str("charts/" + c.chart), "namespace": str(ns), "create_namespace": cty.True})
			r := plan(t, p, helm.Release, c.chart, rel)
			if !r.Diagnostics.HasErrors() {
				t.Fatalf("the plan of %s in a baseline namespace passed:\n%s", c.chart, r.Diff)
			}
			msg := fmt.Sprint(r.Diagnostics)
			contains(t, "the diagnostic", msg, append([]string{"PodSecurity", c.chart, c.object, c.container, "privileged", "kubernetes_namespace", `"baseline"`}, c.checks...)...)
			a := apply(t, p, helm.Release, c.chart, rel, nil, nil)
			if !a.Diagnostics.HasErrors() {
				t.Fatal("apply of a violating release succeeded")
			}
			if got := k.list(t, ns); len(got) != 0 {
				t.Errorf("a violating release was installed: %v", got)
			}

			nsCfg := obj(map[string]cty.Value{"name": str(ns), "pod_security": str("privileged")})
			mustPlan(t, p, helm.Namespace, ns, nsCfg)
			r = mustPlan(t, p, helm.Release, c.chart, rel)
			contains(t, "the plan", r.Diff, "namespace "+ns+": PodSecurity privileged (set by its kubernetes_namespace step)")
			mustApply(t, p, helm.Namespace, ns, nsCfg, nil)
			if !c.install {
				return
			}
			mustApply(t, p, helm.Release, c.chart, rel, nil)

			// A fresh provider (a later run) learns the level from Read of
			// the done namespace step, or from the live label.
			p2 := k.provider(t, nil)
			mustPlan(t, p2, helm.Release, c.chart, rel)
		})
	}
}

// TestSensitive: a set_sensitive canary never appears in the plan, the
// log, diagnostics, the revert data, the private data or the outputs.
func TestSensitive(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "secret")
	const canary = "canary-hunter2-XYZZY"
	cfg := obj(map[string]cty.Value{
		"name": str("app"), "chart": str("charts/app"), "namespace": str(ns), "create_namespace": cty.True,
		"set_sensitive": cty.MapVal(map[string]cty.Value{"password": cty.StringVal(canary)}).Mark(phases.SensitiveMark),
	})
	var shown []string
	r := mustPlan(t, p, helm.Release, "app", cfg)
	contains(t, "the plan", r.Diff, "set_sensitive password = "+phases.Redacted, `password-echo: "`+phases.Redacted+`"`)
	shown = append(shown, r.Diff, fmt.Sprint(r.Diagnostics), string(r.Private))
	var log bytes.Buffer
	a := apply(t, p, helm.Release, "app", cfg, nil, &log)
	if err := a.Diagnostics.Err(); err != nil {
		t.Fatal(err)
	}
	shown = append(shown, log.String(), fmt.Sprint(a.Diagnostics), a.Revert.Description, string(a.Revert.Data), string(a.Private), a.Outputs.GoString())
	// The next plan: the Secret changes, never in clear.
	cfg2 := obj(map[string]cty.Value{
		"name": str("app"), "chart": str("charts/app"), "namespace": str(ns),
		"set_sensitive": cty.MapVal(map[string]cty.Value{"password": cty.StringVal(canary + "-2")}).Mark(phases.SensitiveMark),
	})
	r = mustPlan(t, p, helm.Release, "app", cfg2)
	contains(t, "the plan", r.Diff, "~ Secret "+ns+"/app-secret (changed)")
	shown = append(shown, r.Diff)
	// A failing plan's diagnostics too.
	bad := obj(map[string]cty.Value{
		"name": str("app"), "chart": str("charts/app"), "namespace": str(ns), "timeout": str("x"),
		"set_sensitive": cty.MapVal(map[string]cty.Value{"password": cty.StringVal(canary)}).Mark(phases.SensitiveMark),
		"values":        obj(map[string]cty.Value{"message": cty.StringVal(canary).Mark(phases.SensitiveMark)}),
	})
	r = plan(t, p, helm.Release, "app", bad)
	shown = append(shown, r.Diff, fmt.Sprint(r.Diagnostics))
	for _, s := range shown {
		if strings.Contains(s, canary) {
			t.Errorf("the canary shows in clear:\n%s", s)
		}
	}
	// In the cluster the chart's Secret holds it, as it must.
	sec, err := k.client.CoreV1().Secrets(ns).Get(context.Background(), "app-secret", metav1.GetOptions{})
	if err != nil || string(sec.Data["password"]) != canary {
		t.Errorf("the chart's Secret does not hold the value: %v", err)
	}
}

// TestWait uses Helm's own wait against objects that become ready without
// a kubelet (a ConfigMap and a Deployment of 0 replicas), and atomic
// against one that never does.
func TestWait(t *testing.T) {
	t.Parallel()
	k := lab(t)
	p := k.provider(t, nil)
	ns := k.namespace(t, "wait")
	cfg := obj(map[string]cty.Value{"chart": str("charts/ready"), "namespace": str(ns), "create_namespace": cty.True, "wait": cty.True, "timeout": str("60s")})
	a := mustApply(t, p, helm.Release, "ready", cfg, nil)
	if got := a.Outputs.GetAttr("status").AsString(); got != "deployed" {
		t.Errorf("status = %s", got)
	}

	// One replica that no node may run never becomes ready: atomic
	// uninstalls it.
	bad := obj(map[string]cty.Value{"name": str("never"), "chart": str("charts/ready"), "namespace": str(ns), "atomic": cty.True, "timeout": str("3s"),
		"values": obj(map[string]cty.Value{"replicas": cty.NumberIntVal(1), "nodeSelector": obj(map[string]cty.Value{"migrate.test/none": str("nowhere")})})})
	r := apply(t, p, helm.Release, "never", bad, nil, nil)
	if !r.Diagnostics.HasErrors() {
		t.Fatal("an atomic release that never becomes ready succeeded")
	}
	contains(t, "the diagnostic", fmt.Sprint(r.Diagnostics), "atomic")
	for _, s := range k.list(t, ns) {
		if strings.HasPrefix(s, "never:") {
			t.Errorf("the atomic release is still there: %s", s)
		}
	}
}

// TestKubeconfigLazy: the kubeconfig is read at first use; before it
// exists, the plan says so instead of failing.
func TestKubeconfigLazy(t *testing.T) {
	t.Parallel()
	k := lab(t)
	dir := t.TempDir()
	path := dir + "/kubeconfig"
	p := helm.New()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: obj(map[string]cty.Value{"kubeconfig": str(path)}), Dir: testdata(t)})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure with a kubeconfig not written yet: %v", err)
	}
	ns := k.namespace(t, "lazy")
	cfg := appRelease(ns, nil)
	pr := mustPlan(t, p, helm.Release, "app", cfg)
	contains(t, "the plan", pr.Diff, "cannot be reached yet")
	b, err := readFile(k.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, b); err != nil {
		t.Fatal(err)
	}
	mustApply(t, p, helm.Release, "app", cfg, nil)
	// The step's own kubeconfig wins over the provider's.
	p2 := k.provider(t, map[string]cty.Value{"kubeconfig": str(dir + "/nope")})
	withKC := obj(map[string]cty.Value{"name": str("app"), "chart": str("charts/app"), "namespace": str(ns), "kubeconfig": str(path)})
	if rr := read(t, p2, helm.Release, "app", withKC, nil); rr.Observation != providers.Present {
		t.Errorf("Read with the step's kubeconfig: %v %s", rr.Observation, rr.Detail)
	}
}

func TestApiServerRejectsWhatPreflightRejects(t *testing.T) {
	t.Parallel()
	k := lab(t)
	ns := k.namespace(t, "agree")
	if _, err := k.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.waitSA(t, ns)
	// The unlabelled namespace gets the cluster default (baseline).
	_, err := k.client.CoreV1().Pods(ns).Create(context.Background(), hostPathPod(ns), metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("hostPath Pod in an unlabelled namespace: %v, want forbidden by PodSecurity baseline", err)
	}
	p := k.provider(t, nil)
	r := plan(t, p, helm.Release, "media", obj(map[string]cty.Value{"chart": str("charts/media"), "namespace": str(ns)}))
	if !r.Diagnostics.HasErrors() {
		t.Error("the preflight passed what the API server refuses")
	}
}
