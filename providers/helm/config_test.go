package helm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// TestConfigureLevel: default_pod_security is baseline when unset, and a
// level set is one of the three, an empty one included; a provider block
// with errors refuses every call.
func TestConfigureLevel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  cty.Value
		want string // in the error; "" none
	}{
		{cty.EmptyObjectVal, ""},
		{obj(map[string]cty.Value{"default_pod_security": str("restricted")}), ""},
		{obj(map[string]cty.Value{"default_pod_security": str("")}), `not "".`},
		{obj(map[string]cty.Value{"default_pod_security": str("lax")}), `default_pod_security of provider helm "x" must be "privileged", "baseline" or "restricted", not "lax".`},
	} {
		p := helm.New()
		r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: c.cfg})
		if err := r.Diagnostics.Err(); (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%#v: %v, want %q", c.cfg, err, c.want)
		}
		if c.want == "" {
			continue
		}
		pr := p.Plan(context.Background(), providers.PlanRequest{Type: helm.Namespace, Addr: phases.Address{Type: helm.Namespace, Name: "n"}, Config: cty.EmptyObjectVal})
		if !pr.Diagnostics.HasErrors() {
			t.Errorf("%#v: a plan after a failed Configure: %q", c.cfg, pr.Diff)
		}
	}
}

// TestUnknownValues: a step whose values depend on a step not applied yet
// is planned with what is known (a namespace's level, a release's name,
// a release rendered client-side when only its kubeconfig is unknown),
// read as unknown, and refused at apply; no cluster is needed for that.
func TestUnknownValues(t *testing.T) {
	t.Parallel()
	p := helm.New()
	if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: cty.EmptyObjectVal, Dir: testdata(t)}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	unknown := cty.UnknownVal(cty.String)
	for _, c := range []struct {
		typ  string
		cfg  cty.Value
		want string
		// prefix: want starts the diff (the rest is TestPlanWithoutCluster's).
		prefix bool
	}{
		{helm.Namespace, obj(map[string]cty.Value{"name": unknown}), "namespace (known after earlier steps apply)\n", false},
		{helm.Namespace, obj(map[string]cty.Value{"name": str("media"), "pod_security": str("privileged"), "labels": cty.UnknownVal(cty.Map(cty.String))}),
			"namespace media: PodSecurity privileged\nnamespace media: labels or annotations known after earlier steps apply\n", false},
		{helm.Namespace, obj(map[string]cty.Value{"name": str("media"), "kubeconfig": unknown}),
			"(known after apply): the live namespace; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\n+ namespace media\n", false},
		{helm.Namespace, obj(map[string]cty.Value{"name": str("media"), "pod_security": str("baseline"), "kubeconfig": unknown}),
			"(known after apply): the live namespace; the cluster cannot be read yet (the kubeconfig is written by an earlier step)\nnamespace media: PodSecurity baseline\n+ namespace media\n", true},
		{helm.Release, obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"), "values": obj(map[string]cty.Value{"message": unknown})}),
			"release web/app: values known after earlier steps apply; rendered, diffed and checked against PodSecurity at apply\n", false},
		{helm.Release, obj(map[string]cty.Value{"chart": str("charts/app"), "name": unknown}),
			"release: values known after earlier steps apply; rendered, diffed and checked against PodSecurity at apply\n", false},
		{helm.Release, obj(map[string]cty.Value{"chart": str("charts/app"), "kubeconfig": unknown}),
			"(known after apply): the live diff; the cluster cannot be reached yet (the kubeconfig is written by an earlier step), so the release was rendered client-side and checked against PodSecurity now\nrelease default/app: install chart app-0.1.0 (live diff deferred until the cluster exists)\n", true},
	} {
		a := phases.Address{Type: c.typ, Name: "app"}
		pr := p.Plan(context.Background(), providers.PlanRequest{Type: c.typ, Addr: a, Config: c.cfg, Action: providers.Create})
		if pr.Diagnostics.HasErrors() || pr.Diff != c.want && !(c.prefix && strings.HasPrefix(pr.Diff, c.want)) {
			t.Errorf("Plan %s %#v: %q %v, want %q", c.typ, c.cfg, pr.Diff, pr.Diagnostics.Err(), c.want)
		}
		if r := p.Read(context.Background(), providers.ReadRequest{Type: c.typ, Addr: a, Config: c.cfg}); r.Observation != providers.Unknown || r.Diagnostics.HasErrors() {
			t.Errorf("Read %s %#v: %v %v", c.typ, c.cfg, r.Observation, r.Diagnostics.Err())
		}
		if r := p.Apply(context.Background(), providers.ApplyRequest{Type: c.typ, Addr: a, Config: c.cfg}); !r.Diagnostics.HasErrors() {
			t.Errorf("Apply %s %#v succeeded", c.typ, c.cfg)
		}
	}
}
