package helm_test

import (
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/providertest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	k := lab(t)
	nsStep, nsRel, nsJob := k.namespace(t, "conf"), k.namespace(t, "confrel"), k.madeNamespace(t, "confjob")
	nsSecret := k.createNamespace(t, "confsec")
	providertest.Run(t, providertest.Harness{
		New:            func() providers.Interface { return helm.New() },
		ProviderConfig: obj(map[string]cty.Value{"kubeconfig": str(k.path), "default_pod_security": str("baseline")}),
		Dir:            testdata(t),
		Cases: []providertest.Case{
			{Type: helm.Namespace, Reversible: true, Config: obj(map[string]cty.Value{
				"name":         str(nsStep),
				"pod_security": str("baseline"),
				"labels":       strMap(map[string]string{"purpose": "conformance"}),
			})},
			{Type: helm.Release, Reversible: true, Config: obj(map[string]cty.Value{
				"name":             str("conformance"),
				"chart":            str("charts/app"),
				"namespace":        str(nsRel),
				"create_namespace": cty.True,
				"values":           obj(map[string]cty.Value{"message": str("conformance-message")}),
				"set_sensitive":    strMap(map[string]string{"password": "conformance-secret"}),
				"timeout":          str("1m"),
			})},
			{Type: helm.Manifest, Reversible: true, Config: obj(map[string]cty.Value{
				"namespace": str(nsSecret),
				"objects":   cty.TupleVal([]cty.Value{configMap("", "conformance", map[string]string{"mode": "conformance"})}),
				"wait_for":  str("Ready"),
			})},
			{Type: helm.Secret, Reversible: true, Config: obj(map[string]cty.Value{
				"name":      str("conformance"),
				"namespace": str(nsSecret),
				"data":      strMap(map[string]string{"token": "conformance-token"}),
				"files":     strMap(map[string]string{"ca.crt": "charts/app/Chart.yaml"}),
			})},
			{Type: helm.Job, Reversible: true, Config: jobConfig(k, nsJob, "conformance", podTemplate(nil, nil), nil)},
			// kwok's node: a node made Ready by hand turns Unknown once the
			// node controller misses its heartbeats, before the case runs.
			{Type: helm.Ready, Config: obj(map[string]cty.Value{"node": str("talos-lab"), "timeout": str("30s")})},
		},
	})
}
