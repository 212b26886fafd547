package helm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/zclconf/go-cty/cty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/providers/helm/helmschema"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// servePlugin, set in the environment, makes the test binary the helm
// plugin program (as cmd/migrate-provider-helm is), for the canary
// through the pipe.
const servePlugin = "MIGRATE_HELM_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(servePlugin) != "" {
		if err := providertest.RedirectStderr(); err != nil {
			panic(err)
		}
		os.Exit(plugin.Serve(helm.TypeName, helm.New()))
	}
	os.Setenv(servePlugin, "1") // for the programs the tests start
	// What the programs print on their stderr, for the canary.
	stderr, err := os.CreateTemp("", "helm-plugin-stderr")
	if err != nil {
		panic(err)
	}
	stderr.Close()
	defer os.Remove(stderr.Name())
	os.Setenv(providertest.StderrEnv, stderr.Name())
	// The identity of the encrypted values files of the canary, kept by
	// the programs as cmd/migrate's helm program keeps it; the age files
	// of kubernetes_secret are sealed to it too (setTestIdentity keeps it).
	os.Setenv(providers.AgeIdentityEnv, canaryIdentity.String())
	setTestIdentity()
	os.Exit(m.Run())
}

// TestCanary: a secret planted in every input of the step types, marked
// as a sensitive variable marks it (set_sensitive is sensitive by its
// schema), leaves the provider by no field, log or diagnostic, whether
// the step succeeds or fails, in process and through the plugin pipe. The
// namespace and the release, whose names are secret too, are reverted.
func TestCanary(t *testing.T) {
	t.Parallel()
	k := lab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, via := range []struct {
		name string
		new  func() providers.Interface
	}{
		{"in process", func() providers.Interface { return helm.New() }},
		{"through the plugin pipe", plugin.Factory(plugin.Program{Name: helm.TypeName, Command: self, Schema: helmschema.Schema, Env: []string{providers.AgeIdentityEnv}})},
	} {
		t.Run(via.name, func(t *testing.T) {
			t.Parallel()
			canary(t, k, via.new)
		})
	}
	t.Run("table", func(t *testing.T) {
		t.Parallel()
		canaryTable(t, k, plugin.Factory(plugin.Program{Name: helm.TypeName, Command: self, Schema: helmschema.Schema, Env: []string{providers.AgeIdentityEnv}}))
		// A program's stderr reaches the terminal: no secret in it.
		b, err := os.ReadFile(os.Getenv(providertest.StderrEnv))
		if err != nil {
			t.Fatal(err)
		}
		for _, cn := range providertest.Canaries {
			for _, leak := range providertest.Leaks(string(b), []string{cn.Value}) {
				t.Errorf("the program's stderr: %s", leak)
			}
		}
	})
}

// canaryTable plants each of providertest.Canaries where a value goes (a
// chart's value, a set_sensitive value, a Secret's data, a Job's env),
// through the plugin pipe.
func canaryTable(t *testing.T, k *kube, newProvider func() providers.Interface) {
	sens := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	relNS, secNS, jobNS := k.namespace(t, "tablerel"), k.createNamespace(t, "tablesec"), k.madeNamespace(t, "tablejob")
	var cases []providertest.CanaryCase
	for i, cn := range providertest.Canaries {
		secrets := []string{cn.Value}
		cases = append(cases,
			providertest.CanaryCase{Type: helm.Release, Secrets: secrets, Config: cty.ObjectVal(map[string]cty.Value{
				"name":             cty.StringVal(fmt.Sprintf("tbl-%d", i)),
				"chart":            cty.StringVal("charts/app"),
				"namespace":        cty.StringVal(relNS),
				"create_namespace": cty.True,
				"values":           cty.ObjectVal(map[string]cty.Value{"message": sens(cn.Value), "replicas": cty.NumberIntVal(0)}),
				"set_sensitive":    cty.MapVal(map[string]cty.Value{"password": cty.StringVal(cn.Value)}),
				"timeout":          cty.StringVal("60s"),
			})},
			providertest.CanaryCase{Type: helm.Secret, Secrets: secrets, Config: cty.ObjectVal(map[string]cty.Value{
				"name":      cty.StringVal(fmt.Sprintf("tbl-%d", i)),
				"namespace": cty.StringVal(secNS),
				"data":      cty.MapVal(map[string]cty.Value{"token": cty.StringVal(cn.Value)}),
			})},
			providertest.CanaryCase{Type: helm.Job, Secrets: secrets, Config: cty.ObjectVal(map[string]cty.Value{
				"name":      cty.StringVal(fmt.Sprintf("tbl-%d", i)),
				"namespace": cty.StringVal(jobNS),
				"job": podTemplate(nil, map[string]cty.Value{"container": cty.ObjectVal(map[string]cty.Value{"env": cty.TupleVal([]cty.Value{
					cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("DB_PASSWORD"), "value": sens(cn.Value)}),
				})})}),
				"timeout": cty.StringVal("2m"),
			})},
		)
	}
	providertest.Canary(t, providertest.Harness{
		New:            newProvider,
		ProviderConfig: obj(map[string]cty.Value{"kubeconfig": str(k.path)}),
		Dir:            testdata(t),
	}, cases)
}

var canaryIdentity, _ = age.GenerateX25519Identity()

func canary(t *testing.T, k *kube, newProvider func() providers.Interface) {
	const s = "cnry-helm-7f3a"
	sens := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	ns, relNS := k.namespace(t, "canary"), k.namespace(t, "canaryrel")
	dir := t.TempDir()
	valuesFile := filepath.Join(dir, "values-"+s+".yaml")
	if err := os.WriteFile(valuesFile, []byte("replicas: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	namespace := cty.ObjectVal(map[string]cty.Value{
		"name":         sens(ns),
		"labels":       cty.MapVal(map[string]cty.Value{"purpose": sens(s), "plain": cty.StringVal("visible")}),
		"annotations":  cty.MapVal(map[string]cty.Value{"note": sens("note " + s)}),
		"pod_security": sens("baseline"),
		"kubeconfig":   sens(k.path),
	})
	release := func(chart string) cty.Value {
		return cty.ObjectVal(map[string]cty.Value{
			"name":             sens("rel-" + s),
			"chart":            sens(chart),
			"namespace":        sens(relNS),
			"create_namespace": cty.True,
			"values":           cty.ObjectVal(map[string]cty.Value{"message": sens("message " + s), "image": cty.StringVal("registry.local/app:1.0")}),
			"values_files":     cty.ListVal([]cty.Value{sens(valuesFile)}),
			"set_sensitive":    cty.MapVal(map[string]cty.Value{"password": cty.StringVal("password-" + s)}),
			"timeout":          sens("60s"),
			"kubeconfig":       sens(k.path),
		})
	}
	// An encrypted values file: its values are secret though nothing in
	// the step marks them (the ConfigMap shows message in the diff).
	const encMessage = "enc-message-" + s
	sealedFile := filepath.Join(dir, "secret-values.yaml.age")
	sealed, err := agefile.Encrypt([]byte("message: "+encMessage+"\nreplicas: 0\n"), false, canaryIdentity.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sealedFile, sealed, 0o600); err != nil {
		t.Fatal(err)
	}
	encrypted := cty.ObjectVal(map[string]cty.Value{
		"name":             sens("enc-" + s),
		"chart":            cty.StringVal("charts/app"),
		"namespace":        sens(relNS),
		"create_namespace": cty.True,
		"values_files":     cty.ListVal([]cty.Value{cty.StringVal(valuesFile), cty.StringVal(sealedFile)}),
		"kubeconfig":       sens(k.path),
	})
	secNS := k.createNamespace(t, "canarysec")
	ageValue := "age-plaintext-" + s
	secret := cty.ObjectVal(map[string]cty.Value{
		"name":       sens("sec-" + s),
		"namespace":  cty.StringVal(secNS),
		"data":       cty.MapVal(map[string]cty.Value{"token": cty.StringVal("data-value-" + s)}),
		"files":      cty.MapVal(map[string]cty.Value{"signing.key": cty.StringVal(ageFile(t, "signing.key", ageValue))}),
		"kubeconfig": sens(k.path),
	})
	manifestFile := yamlFile(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: man-secret\nstringData:\n  token: manifest-value-"+s+"\n")
	manifest := cty.ObjectVal(map[string]cty.Value{
		"files":      cty.ListVal([]cty.Value{cty.StringVal(manifestFile)}),
		"objects":    cty.TupleVal([]cty.Value{configMap("", "man-"+s, map[string]string{"token": "object-value-" + s}).Mark(phases.SensitiveMark)}),
		"namespace":  cty.StringVal(secNS),
		"kubeconfig": sens(k.path),
	})
	jobNS := k.madeNamespace(t, "canaryjob")
	job := func(annotations map[string]string) cty.Value {
		env := cty.TupleVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal("DB_PASSWORD"), "value": sens("pw-" + s)})})
		return cty.ObjectVal(map[string]cty.Value{
			"name":      sens("job-" + s),
			"namespace": sens(jobNS),
			"job":       markSecret(podTemplate(annotations, map[string]cty.Value{"container": cty.ObjectVal(map[string]cty.Value{"env": env})}), s),
			"timeout":   sens("2m"),
		})
	}
	secrets := []string{s, ns, relNS, jobNS, k.path, valuesFile, "password-" + s, "data-value-" + s, ageValue, "manifest-value-" + s, "object-value-" + s, encMessage}
	providertest.Canary(t, providertest.Harness{
		New:            newProvider,
		ProviderConfig: obj(map[string]cty.Value{"kubeconfig": str(k.path)}),
		Dir:            testdata(t),
	}, []providertest.CanaryCase{
		{Type: helm.Namespace, Config: namespace, Secrets: secrets},
		{Type: helm.Namespace, Config: cty.ObjectVal(map[string]cty.Value{"name": sens(ns), "pod_security": sens("bogus-" + s)}), Secrets: secrets},
		{Type: helm.Release, Config: release("charts/app"), Secrets: secrets},
		{Type: helm.Release, Config: release("charts/nope-" + s), Secrets: secrets},
		{Type: helm.Release, Config: encrypted, Secrets: secrets},
		{Type: helm.Secret, Config: secret, Secrets: secrets},
		{Type: helm.Manifest, Config: manifest, Secrets: secrets},
		{Type: helm.Job, Config: job(nil), Secrets: secrets},
		{Type: helm.Job, Config: job(map[string]string{"migrate.test/fail": "Failed-" + s}), Secrets: secrets},
	})
	// The reverts found the namespace and the release by the names the
	// step gives, though the state keeps only their place.
	ctx := context.Background()
	if live, err := k.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && live.DeletionTimestamp == nil {
		t.Errorf("namespace %s was not deleted by the revert", ns)
	}
	if got := k.configMapData(t, secNS, "man-"+s); got != nil {
		t.Errorf("ConfigMap man-%s was not deleted by the revert", s)
	}
	if got := k.secretData(t, secNS, "sec-"+s); got != nil {
		t.Errorf("Secret sec-%s was not deleted by the revert", s)
	}
	if got := k.list(t, relNS); len(got) != 0 {
		t.Errorf("releases left in %s after the reverts: %v", relNS, got)
	}
}

// markSecret marks the strings of v that contain secret sensitive, as a
// sensitive variable interpolated into them would.
func markSecret(v cty.Value, secret string) cty.Value {
	out, _ := cty.Transform(v, func(_ cty.Path, v cty.Value) (cty.Value, error) {
		if v.Type() == cty.String && !v.IsMarked() && v.IsKnown() && !v.IsNull() && strings.Contains(v.AsString(), secret) {
			return v.Mark(phases.SensitiveMark), nil
		}
		return v, nil
	})
	return out
}
