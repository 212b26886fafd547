package talos_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/plugin"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
	"github.com/homelab-migrate/migrate/providers/talos/talosschema"
)

// The test binary is also the talos plugin program: with
// MIGRATE_TALOS_PLUGIN_TEST=serve it serves the provider on its standard
// input and output, as migrate-provider-talos does.
func TestMain(m *testing.M) {
	if os.Getenv("MIGRATE_TALOS_PLUGIN_TEST") == "serve" {
		if err := providertest.RedirectStderr(); err != nil {
			panic(err)
		}
		os.Exit(plugin.Serve(talos.TypeName, talos.New()))
	}
	os.Setenv("MIGRATE_TALOS_PLUGIN_TEST", "serve") // for the programs the tests start
	// What the programs print on their stderr, for the canary.
	stderr, err := os.CreateTemp("", "talos-plugin-stderr")
	if err != nil {
		panic(err)
	}
	stderr.Close()
	os.Setenv(providertest.StderrEnv, stderr.Name())
	code := m.Run()
	os.Remove(stderr.Name())
	os.Exit(code)
}

// TestCanary: a secret planted in every string input of every step type
// (marked as a sensitive variable marks it), and the secrets the provider
// block loads (the secrets bundle, the age identity), leave the provider
// by no field, log or diagnostic, whether the step succeeds or fails; in
// process and through the plugin pipe.
func TestCanary(t *testing.T) {
	t.Parallel()
	const s = "canary-talos-7c2d"
	l := startNode(t, "v1.13.3")
	l.write(t, "patches/"+s+".yaml", briefPatch)
	// A secret a patch adds to the config (a registry's password), in a
	// config that is also user_data, the sensitive output whose secrets
	// scrubbers learn by its parts (first_install = "nocloud").
	l.write(t, "patches/registry.yaml", "machine:\n  registries:\n    config:\n      registry.example:\n        auth:\n          username: migrate\n          password: "+s+"\n")
	probe := filepath.Join(l.n.Root(), "var/mnt/data", s)
	mustWrite(t, probe, s+"\n")
	mustWrite(t, filepath.Join(l.n.Root(), "var/mnt/data/.probe"), "ok\n")
	sens := func(v string) cty.Value { return cty.StringVal(v).Mark(phases.SensitiveMark) }
	loaded := append(l.bundleSecrets(t), l.id.String())
	secrets := append([]string{s}, loaded...)
	cases := []providertest.CanaryCase{
		{Type: talos.MachineConfig, Secrets: secrets, Config: obj(map[string]cty.Value{
			"patches":     cty.ListVal([]cty.Value{sens("patches/" + s + ".yaml")}),
			"try_timeout": cty.StringVal("20s"),
			"rendered":    sens("out/rendered-" + s + ".yaml"),
			"verify": obj(map[string]cty.Value{
				"services":   cty.ListVal([]cty.Value{cty.StringVal("apid")}),
				"files":      cty.MapVal(map[string]cty.Value{"/var/mnt/data/" + s: sens(s)}),
				"kubernetes": cty.False,
			}),
		})},
		// A failing check: its message names the file and content.
		{Type: talos.MachineConfig, Secrets: secrets, Config: obj(map[string]cty.Value{
			"try_timeout": cty.StringVal("5s"),
			"verify": obj(map[string]cty.Value{
				"services":   cty.ListValEmpty(cty.String),
				"files":      cty.MapVal(map[string]cty.Value{"/var/mnt/data/.probe": sens("not-" + s)}),
				"kubernetes": cty.False,
			}),
		})},
		{Type: talos.MachineConfig, Secrets: secrets, Config: obj(map[string]cty.Value{
			"patches":       cty.ListVal([]cty.Value{sens("patches/" + s + ".yaml"), cty.StringVal("patches/registry.yaml")}),
			"first_install": cty.StringVal("nocloud"),
			"try_timeout":   cty.StringVal("20s"),
			"verify":        obj(map[string]cty.Value{"services": strs("apid"), "files": cty.MapValEmpty(cty.String), "kubernetes": cty.False}),
		})},
		{Type: talos.Bootstrap, Config: cty.EmptyObjectVal, Secrets: loaded},
		{Type: talos.Kubeconfig, Config: obj(map[string]cty.Value{"path": sens("out/kubeconfig-" + s)}), Secrets: secrets},
		{Type: talos.Read, Config: obj(map[string]cty.Value{"path": sens("/var/mnt/data/" + s), "expect": sens(s)}), Secrets: secrets},
		{Type: talos.Read, Config: obj(map[string]cty.Value{"path": sens("/var/mnt/data/" + s), "contains": sens("not-" + s)}), Secrets: secrets},
		{Type: talos.Read, Config: obj(map[string]cty.Value{"path": sens("/var/mnt/data/" + s), "contains": sens("not-" + s), "error_message": sens("no iGPU " + s)}), Secrets: secrets},
		{Type: talos.Read, Config: obj(map[string]cty.Value{"path": sens("/var/mnt/data/missing-" + s)}), Secrets: secrets},
		// A service name long enough to count as a secret, and healthy:
		// a missing one would wait for minutes.
		{Type: talos.ServiceHealth, Config: obj(map[string]cty.Value{"services": cty.ListVal([]cty.Value{cty.StringVal("apid"), sens("kubelet")})}), Secrets: append([]string{"kubelet"}, loaded...)},
		{Type: talos.Upgrade, Config: obj(map[string]cty.Value{"version": sens("v1.13.3"), "preserve": cty.True}), Secrets: append([]string{"v1.13.3"}, loaded...)},
	}
	// Each canary where a value goes: the content a read expects, or
	// must contain, and what its failure means.
	for i, cn := range providertest.Canaries {
		probe := fmt.Sprintf("/var/mnt/data/probe-%d", i)
		mustWrite(t, filepath.Join(l.n.Root(), probe), cn.Value+"\n")
		secrets := append([]string{cn.Value}, loaded...)
		cases = append(cases,
			providertest.CanaryCase{Type: talos.Read, Config: obj(map[string]cty.Value{"path": cty.StringVal(probe), "expect": sens(cn.Value)}), Secrets: secrets},
			providertest.CanaryCase{Type: talos.Read, Config: obj(map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/.probe"), "expect": sens(cn.Value)}), Secrets: secrets},
			providertest.CanaryCase{Type: talos.Read, Config: obj(map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/.probe"), "contains": sens(cn.Value), "error_message": sens("no " + cn.Value)}), Secrets: secrets},
		)
	}
	all := []string{s}
	for _, cn := range providertest.Canaries {
		all = append(all, cn.Value)
	}
	inProcess := providertest.Harness{New: func() providers.Interface { return talos.New() }, ProviderConfig: l.providerConfig(nil), Dir: l.dir}
	t.Run("in process", func(t *testing.T) { providertest.Canary(t, inProcess, cases) })

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prog := plugin.Program{Name: talos.TypeName, Command: exe, Schema: talosschema.Schema, Env: []string{providers.AgeIdentityEnv}}
	piped := inProcess
	piped.New = plugin.Factory(prog)
	t.Run("through the pipe", func(t *testing.T) {
		providertest.Canary(t, piped, cases)
		// A program's stderr reaches the terminal: no secret in it.
		b, err := os.ReadFile(os.Getenv(providertest.StderrEnv))
		if err != nil {
			t.Fatal(err)
		}
		for _, leak := range providertest.Leaks(string(b), append(all, loaded...)) {
			t.Errorf("the program's stderr: %s", leak)
		}
	})
}

// TestUnknownRenderedWritesNothing: a rendered path not known yet does not
// keep the plan from rendering and showing the diff, and nothing is
// written under a placeholder name.
func TestUnknownRenderedWritesNothing(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	p := l.provider(t, nil)
	r := plan(p, talos.MachineConfig, obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "rendered": cty.UnknownVal(cty.String)}))
	if err := r.Diagnostics.Err(); err != nil || !strings.Contains(r.Diff, "rendered config sha256") {
		t.Fatalf("plan: %v\n%s", err, r.Diff)
	}
	entries, _ := os.ReadDir(l.dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), "known") {
			t.Errorf("the plan wrote %s", e.Name())
		}
	}
}
