package helm_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/chart"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/helm/ocitest"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

// moved is the app chart as someone pushes it again under the same
// version: another manifest digest.
func moved(ch *chart.Chart) { ch.Metadata.Description = "pushed again under the same version" }

// TestOCIChart: a chart pushed to a real registry (Debian's
// docker-registry) installs from its oci:// reference, the plan naming
// the version and digest it resolved to; pushed again under the same
// version, apply with that plan refuses it naming both digests, as does
// a step that pins the first digest, and nothing is installed.
func TestOCIChart(t *testing.T) {
	t.Parallel()
	k := lab(t)
	reg := ocitest.Start(t, ocitest.Options{})
	app := filepath.Join(testdata(t), "charts", "app")
	first := reg.Push(t, app, "charts/app", nil)
	p := k.provider(t, nil)
	ns := k.namespace(t, "oci")
	cfg := func(extra map[string]cty.Value) cty.Value {
		attrs := map[string]cty.Value{"chart": str(reg.Ref("charts/app")), "version": str("0.1.0"), "namespace": str(ns),
			"create_namespace": cty.True, "values": obj(map[string]cty.Value{"replicas": cty.NumberIntVal(0)})}
		for n, v := range extra {
			attrs[n] = v
		}
		return obj(attrs)
	}

	planned := mustPlan(t, p, helm.Release, "app", cfg(nil))
	contains(t, "the plan", planned.Diff, "install chart app-0.1.0", "chart "+reg.Ref("charts/app")+": version 0.1.0, digest "+first)
	installed := applyPlanned(t, p, cfg(nil), planned)
	if err := installed.Diagnostics.Err(); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if got := k.history(t, ns, "app"); got != "1:deployed" {
		t.Fatalf("history after the install: %s", got)
	}

	upgrade := mustPlan(t, p, helm.Release, "app", cfg(nil))
	second := reg.Push(t, app, "charts/app", moved)
	if second == first {
		t.Fatal("the chart pushed again has the first one's digest")
	}
	r := applyPlanned(t, p, cfg(nil), upgrade)
	refused(t, r, "Chart Changed Since Plan", "resolves to "+second+" now, but the plan was made with "+first)
	if got := k.history(t, ns, "app"); got != "1:deployed" {
		t.Errorf("history after the refused upgrade: %s", got)
	}

	pinned := cfg(map[string]cty.Value{"digest": str(first)})
	refused(t, plan(t, p, helm.Release, "app", pinned), "Chart Digest Mismatch", "resolves to "+second+" now, but the step pins digest "+first)
	refused(t, apply(t, p, helm.Release, "app", pinned, nil, nil), "Chart Digest Mismatch", second, first)
	contains(t, "the plan pinned to the new digest", mustPlan(t, p, helm.Release, "app", cfg(map[string]cty.Value{"digest": str(second)})).Diff,
		"digest "+second+" (pinned)")
}

// TestOCIChartDigestResolved: the input digest of an unpinned OCI chart
// (what a saved plan's contract compares) changes when its version is
// pushed again, and says both digests.
func TestOCIChartDigestResolved(t *testing.T) {
	t.Parallel()
	reg := ocitest.Start(t, ocitest.Options{})
	app := filepath.Join(testdata(t), "charts", "app")
	first := reg.Push(t, app, "charts/app", nil)
	p := configured(t, t.TempDir())
	rel := obj(map[string]cty.Value{"chart": str(reg.Ref("charts/app")), "namespace": str("web")})
	before := digestOf(t, p, rel)
	second := reg.Push(t, app, "charts/app", moved)
	after := digestOf(t, p, rel)
	if before.Digest == after.Digest {
		t.Error("a version pushed again leaves the release's digest as it was")
	}
	contains(t, "resolved before", before.Resolved, "chart "+reg.Ref("charts/app")+" resolved to app-0.1.0, digest "+first)
	contains(t, "resolved after", after.Resolved, "resolved to app-0.1.0, digest "+second)
}

// TestOCIChartVersions: an OCI chart's version is picked among the
// registry's tags as helm install picks it: the highest when unset, the
// highest matching a constraint, a build's "+" pushed as "_"; a version
// the registry does not have is refused naming it.
func TestOCIChartVersions(t *testing.T) {
	t.Parallel()
	reg := ocitest.Start(t, ocitest.Options{})
	app := filepath.Join(testdata(t), "charts", "app")
	for _, v := range []string{"0.1.0", "0.2.0", "1.0.0+build1"} {
		reg.Push(t, app, "charts/app", func(ch *chart.Chart) { ch.Metadata.Version = v })
	}
	p := configured(t, t.TempDir())
	for version, want := range map[string]string{"": "app-1.0.0+build1", "^0.1": "app-0.1.0", "~0.2": "app-0.2.0", "1.0.0+build1": "app-1.0.0+build1"} {
		rel := obj(map[string]cty.Value{"chart": str(reg.Ref("charts/app")), "version": str(version), "namespace": str("web")})
		contains(t, "version "+version, digestOf(t, p, rel).Resolved, "resolved to "+want+", digest sha256:")
	}
	rel := obj(map[string]cty.Value{"chart": str(reg.Ref("charts/app")), "version": str("0.9.0"), "namespace": str("web")})
	r := p.InputDigest(t.Context(), providers.DigestRequest{Type: helm.Release, Addr: addr(helm.Release, "app"), Config: rel})
	refused(t, r, "Cannot Load Chart", "version 0.9.0", "not found")
}

// TestOCIChartCredentials: a registry that requires a password over TLS
// is refused without them and reached with username and password, or
// with a registry config, and its CA; the password leaves by no field,
// log or diagnostic (providertest.Canary), in process and through the
// plugin pipe, whether the pull succeeds or the registry refuses it.
func TestOCIChartCredentials(t *testing.T) {
	t.Parallel()
	k := lab(t)
	const user = "migrate"
	password := providertest.Canaries[0].Value
	reg := ocitest.Start(t, ocitest.Options{Username: user, Password: password, TLS: true})
	reg.Push(t, filepath.Join(testdata(t), "charts", "app"), "charts/app", nil)
	p := k.provider(t, nil)
	ns := k.namespace(t, "ocicred")
	cfg := func(extra map[string]cty.Value) cty.Value {
		attrs := map[string]cty.Value{"chart": str(reg.Ref("charts/app")), "version": str("0.1.0"), "namespace": str(ns),
			"create_namespace": cty.True, "timeout": str("60s"), "values": obj(map[string]cty.Value{"replicas": cty.NumberIntVal(0)})}
		for n, v := range extra {
			attrs[n] = v
		}
		return obj(attrs)
	}
	withCA := map[string]cty.Value{"ca_file": str(reg.CAFile)}
	refused(t, plan(t, p, helm.Release, "app", cfg(nil)), "Cannot Load Chart", "plain HTTP was spoken", "set plain_http = false, or ca_file")
	refused(t, plan(t, p, helm.Release, "app", cfg(map[string]cty.Value{"plain_http": cty.False})), "Cannot Load Chart", "certificate", "set ca_file")
	refused(t, plan(t, p, helm.Release, "app", cfg(withCA)), "Cannot Load Chart", "set username and password, or registry_config")
	mustPlan(t, p, helm.Release, "app", cfg(map[string]cty.Value{"ca_file": str(reg.CAFile), "username": str(user), "password": str(password)}))
	mustPlan(t, p, helm.Release, "app", cfg(map[string]cty.Value{"ca_file": str(reg.CAFile), "registry_config": str(registryConfig(t, reg.Host, user, password))}))

	var cases []providertest.CanaryCase
	for _, cn := range providertest.Canaries {
		cases = append(cases, providertest.CanaryCase{Type: helm.Release, Secrets: []string{cn.Value}, Config: cfg(map[string]cty.Value{
			"ca_file": str(reg.CAFile), "username": str(user), "password": str(cn.Value)})})
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, newProvider := range []func() providers.Interface{
		func() providers.Interface { return helm.New() },
		plugin.Factory(plugin.Program{Name: helm.TypeName, Command: self, Schema: helmschema.Schema, Env: []string{providers.AgeIdentityEnv}}),
	} {
		providertest.Canary(t, providertest.Harness{New: newProvider,
			ProviderConfig: obj(map[string]cty.Value{"kubeconfig": str(k.path)}), Dir: testdata(t)}, cases)
	}
}

// registryConfig writes a Docker config with the registry's credentials.
func registryConfig(t *testing.T, host, user, password string) string {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	b, err := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOCIChartAttributesChecked: what a remote chart's attributes must
// be is said at validation, before anything is fetched.
func TestOCIChartAttributesChecked(t *testing.T) {
	t.Parallel()
	p := configured(t, t.TempDir())
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		attrs map[string]cty.Value
		want  string
	}{
		{map[string]cty.Value{"chart": str("oci://127.0.0.1:1/charts/app"), "digest": str("sha256:abc")}, "Invalid Chart Digest"},
		{map[string]cty.Value{"chart": str("charts/app"), "digest": str(digest)}, "Digest Of A Local Chart"},
		{map[string]cty.Value{"chart": str("oci://127.0.0.1:1/charts/app@" + digest)}, "Digest In Chart Reference"},
		{map[string]cty.Value{"chart": str("oci://127.0.0.1:1/charts/app"), "username": str("u")}, "Incomplete Registry Credentials"},
		{map[string]cty.Value{"chart": str("https://u:hunter2@127.0.0.1:1/charts/app")}, "Credentials In Chart URL"},
		{map[string]cty.Value{"chart": str("oci://127.0.0.1:1/charts/app"), "plain_http": cty.True, "ca_file": str("ca.pem")}, "Plain HTTP With A CA File"},
	} {
		r := p.Plan(t.Context(), providers.PlanRequest{Type: helm.Release, Addr: addr(helm.Release, "app"), Config: obj(c.attrs), Action: providers.Create})
		if err := r.Diagnostics.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.attrs, err, c.want)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the refusal shows the URL's password: %v", err)
		}
	}
}

// applyPlanned applies cfg with the plan's private data, as run does.
func applyPlanned(t *testing.T, p providers.Interface, cfg cty.Value, planned providers.PlanResponse) providers.ApplyResponse {
	t.Helper()
	return p.Apply(t.Context(), providers.ApplyRequest{Type: helm.Release, Addr: addr(helm.Release, "app"), Config: cfg, Planned: planned.Private, Log: &strings.Builder{}})
}

// refused checks that a response failed, saying every one of wants.
func refused(t *testing.T, r any, wants ...string) {
	t.Helper()
	var err error
	switch r := r.(type) {
	case providers.PlanResponse:
		err = r.Diagnostics.Err()
	case providers.ApplyResponse:
		err = r.Diagnostics.Err()
	case providers.DigestResponse:
		err = r.Diagnostics.Err()
	}
	if err == nil {
		t.Fatalf("not refused; want %q", wants)
	}
	contains(t, "the refusal", fmt.Sprint(err), wants...)
}
