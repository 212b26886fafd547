package helm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// offline is a provider whose cluster does not exist yet: its kubeconfig
// names a file an earlier step would write. No API server is used.
func offline(t testing.TB, extra map[string]cty.Value) *helm.Provider {
	t.Helper()
	p := helm.New()
	attrs := map[string]cty.Value{"kubeconfig": str(filepath.Join(t.TempDir(), "kubeconfig"))}
	for n, v := range extra {
		attrs[n] = v
	}
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: obj(attrs), Dir: testdata(t)})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPlanWithoutCluster: a release whose kubeconfig is not known yet, or
// names a file not written yet, is rendered client-side and planned as an
// install with its objects listed, the live diff deferred; Secrets and
// set_sensitive values stay redacted. Values not known yet keep the plan
// deferred as a whole.
func TestPlanWithoutCluster(t *testing.T) {
	t.Parallel()
	p := offline(t, nil)
	secret := "s3cr3t-canary-offline"
	for name, kc := range map[string]cty.Value{
		"unknown kubeconfig": cty.UnknownVal(cty.String),
		"missing file":       cty.NullVal(cty.String),
	} {
		rel := obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"), "kubeconfig": kc,
			"values":        obj(map[string]cty.Value{"message": str("hi"), "extra": cty.True}),
			"set_sensitive": strMap(map[string]string{"password": secret})})
		r := mustPlan(t, p, helm.Release, "app", rel)
		contains(t, name+": the plan", r.Diff,
			"(known after apply): the live diff; the cluster cannot be reached yet",
			"release web/app: install chart app-0.1.0 (live diff deferred until the cluster exists)\n",
			"namespace web: PodSecurity baseline (the cluster default)\n",
			"objects: 5 rendered, to add unless the cluster already has them\n",
			"+ ConfigMap web/app-config (added)\n", "+ ConfigMap web/app-extra (added)\n",
			"+ Deployment web/app (added)\n", "+ Secret web/app-secret (added)\n", "+ Service web/app (added)\n",
			"  +   message: \"hi\"\n", "set_sensitive password = ")
		if !strings.HasPrefix(r.Diff, "(known after apply): ") {
			t.Errorf("%s: the plan does not start with the deferred marker:\n%s", name, r.Diff)
		}
		if strings.Contains(r.Diff, secret) || strings.Contains(fmt.Sprint(r.Diagnostics), secret) {
			t.Errorf("%s: the sensitive value leaks into the plan:\n%s", name, r.Diff)
		}
	}
	// Values themselves not known: nothing can be rendered yet.
	rel := obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"), "values": obj(map[string]cty.Value{"message": cty.UnknownVal(cty.String)})})
	if r := mustPlan(t, p, helm.Release, "app", rel); !strings.Contains(r.Diff, "values known after earlier steps apply") || strings.Contains(r.Diff, "objects:") {
		t.Errorf("a release with unknown values: %q", r.Diff)
	}
	// A chart that cannot be rendered fails the plan, cluster or not.
	rel = obj(map[string]cty.Value{"chart": str("charts/nope"), "namespace": str("web")})
	if r := plan(t, p, helm.Release, "app", rel); !r.Diagnostics.HasErrors() {
		t.Errorf("a missing chart planned: %q", r.Diff)
	}
}

// TestPreflightWithoutCluster: a release that PodSecurity would refuse
// fails the plan before its cluster exists, naming the object, the
// container and the checks; the level of the namespace's
// kubernetes_namespace step is honoured over the provider's default, and
// the default applies where no step sets one.
func TestPreflightWithoutCluster(t *testing.T) {
	t.Parallel()
	unknown := cty.UnknownVal(cty.String)
	for _, c := range []struct {
		chart, object, container string
		checks                   []string
	}{
		{"media", "Deployment", "jellyfin", []string{"hostPath", "dri"}},
		{"ci-runner", "StatefulSet", "dind", []string{"privileged"}},
	} {
		t.Run(c.chart, func(t *testing.T) {
			t.Parallel()
			ns := "t-" + c.chart
			rel := obj(map[string]cty.Value{"chart": str("charts/" + c.chart), "namespace": str(ns), "kubeconfig": unknown})

			// The provider's default, baseline: refused.
			p := offline(t, nil)
			r := plan(t, p, helm.Release, c.chart, rel)
			if !r.Diagnostics.HasErrors() {
				t.Fatalf("the plan of %s in a baseline namespace passed:\n%s", c.chart, r.Diff)
			}
			contains(t, "the diagnostic", fmt.Sprint(r.Diagnostics), append([]string{"PodSecurity", c.chart, c.object, c.container, `"baseline"`}, c.checks...)...)

			// Its namespace step says privileged: passes, and says why.
			nsCfg := obj(map[string]cty.Value{"name": str(ns), "pod_security": str("privileged"), "kubeconfig": unknown})
			mustPlan(t, p, helm.Namespace, ns, nsCfg)
			r = mustPlan(t, p, helm.Release, c.chart, rel)
			contains(t, "the plan", r.Diff, "namespace "+ns+": PodSecurity privileged (set by its kubernetes_namespace step)\n", "+ "+c.object+" "+ns+"/")

			// A privileged default, but the namespace step says baseline:
			// the step wins.
			p = offline(t, map[string]cty.Value{"default_pod_security": str("privileged")})
			mustPlan(t, p, helm.Release, c.chart, rel)
			mustPlan(t, p, helm.Namespace, ns, obj(map[string]cty.Value{"name": str(ns), "pod_security": str("baseline"), "kubeconfig": unknown}))
			r = plan(t, p, helm.Release, c.chart, rel)
			if !r.Diagnostics.HasErrors() {
				t.Fatalf("the plan of %s passed in a namespace its step makes baseline:\n%s", c.chart, r.Diff)
			}
			contains(t, "the diagnostic", fmt.Sprint(r.Diagnostics), c.object, c.container, `"baseline"`)
		})
	}
}
