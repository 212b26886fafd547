package talos_test

import (
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/providertest"
	"github.com/homelab-migrate/migrate/providers/talos"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	l := startNode(t, "v1.13.3")
	probe := l.n.Root() + "/var/mnt/data/.probe"
	mustWrite(t, probe, "ok\n")
	images := httptest.NewServer(factory.New(factory.Options{}).Handler())
	t.Cleanup(images.Close)
	providertest.Run(t, providertest.Harness{
		New:            func() providers.Interface { return talos.New() },
		ProviderConfig: l.providerConfig(map[string]cty.Value{"image_factory": cty.StringVal(images.URL)}),
		Dir:            l.dir,
		// In order: the bootstrap comes before the upgrade, which needs it.
		Cases: []providertest.Case{
			{Type: talos.MachineConfig, Reversible: true, Config: obj(map[string]cty.Value{
				"patches":     strs("patches/node.yaml"),
				"try_timeout": cty.StringVal("30s"),
				"verify":      verify([]string{"apid"}, map[string]string{"/var/mnt/data/.probe": "ok"}),
			})},
			{Type: talos.Bootstrap, Config: cty.EmptyObjectVal},
			{Type: talos.Kubeconfig, Reversible: true, Config: obj(map[string]cty.Value{"path": cty.StringVal(filepath.Join(t.TempDir(), "kubeconfig"))})}, // in clear: outside the runbook
			{Type: talos.Read, Reversible: true, Config: obj(map[string]cty.Value{"path": cty.StringVal("/var/mnt/data/.probe"), "expect": cty.StringVal("ok")})},
			{Type: talos.ServiceHealth, Reversible: true, Config: obj(map[string]cty.Value{"services": strs("apid", "etcd")})},
			{Type: talos.Upgrade, Reversible: true, Config: obj(map[string]cty.Value{"version": cty.StringVal("v1.13.3")})},
			{Type: talos.Image, Reversible: true, Config: obj(map[string]cty.Value{"path": cty.StringVal("out/talos.iso")})},
		},
	})
}
