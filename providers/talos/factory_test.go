package talos_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// ownerFactory is a lab factory that adds an owner to what it stores: the
// ID it answers for the i915 schematic, and its host.
func ownerFactory(t *testing.T, owner string) (url, host, id string) {
	t.Helper()
	srv := httptest.NewServer(factory.New(factory.Options{Owner: owner}).Handler())
	t.Cleanup(srv.Close)
	s := factory.Schematic{Owner: owner}
	s.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/i915"}
	id, err := s.ID()
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL, strings.TrimPrefix(srv.URL, "http://"), id
}

// A factory that adds a field answers another ID than ours: the plan
// shows both and the schematic it stores, the step passes with the
// factory's ID (installer, ISO, outputs), and a later answer of another
// ID for the same schematic is drift.
func TestFactoryAddingAFieldIsAdopted(t *testing.T) {
	t.Parallel()
	url, host, id := ownerFactory(t, "homelab")
	local := talos.ExtensionsSchematicID("siderolabs/i915")
	dir := t.TempDir()
	p := imageProvider(t, dir, url, "v1.13.3", "siderolabs/i915")
	cfg := imageConfig("talos.iso")

	pr := p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Action: providers.Create})
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	for _, want := range []string{"Factory at " + url + " answered ID " + id + " for this schematic; computed locally " + local,
		"(the factory may add fields, e.g. owner)", "owner: homelab", "installer " + host + "/metal-installer/" + id + ":v1.13.3",
		url + "/image/" + id + "/v1.13.3/metal-amd64.iso"} {
		if !strings.Contains(pr.Diff, want) {
			t.Errorf("the plan does not say %q:\n%s", want, pr.Diff)
		}
	}

	r, log := fetch(t, p, cfg, nil)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log)
	}
	if got := outStr(r.Outputs, "schematic_id"); got != id {
		t.Errorf("schematic_id = %s, want the factory's %s", got, id)
	}
	if got := outStr(r.Outputs, "installer"); got != host+"/metal-installer/"+id+":v1.13.3" {
		t.Errorf("installer = %s", got)
	}
	if !strings.Contains(log, "answered ID "+id) || !strings.Contains(log, "computed locally "+local) {
		t.Errorf("the log does not show both IDs:\n%s", log)
	}
	prior := &providers.Prior{Outputs: r.Outputs}
	if rd := p.Read(context.Background(), providers.ReadRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior}); rd.Observation != providers.Present {
		t.Errorf("Read after the apply: %v %s %v", rd.Observation, rd.Detail, rd.Diagnostics.Err())
	}

	// The same schematic, and the factory now answers another ID.
	other, _, otherID := ownerFactory(t, "someone-else")
	p2 := imageProvider(t, dir, other, "v1.13.3", "siderolabs/i915")
	rd := p2.Read(context.Background(), providers.ReadRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior})
	if rd.Observation != providers.Drifted || !strings.Contains(rd.Detail, "now answers ID "+otherID) || !strings.Contains(rd.Detail, "the state pins "+id) {
		t.Errorf("Read against a factory answering another ID: %v %s", rd.Observation, rd.Detail)
	}
}

// The installer of a machine config is on the configured factory's
// registry, by the factory's ID, never factory.talos.dev's.
func TestInstallerFollowsTheConfiguredFactory(t *testing.T) {
	t.Parallel()
	url, host, id := ownerFactory(t, "homelab")
	l := startMaintenance(t, maintDisks) // only its bundle and talosconfig are used
	conf := l.config(false)
	conf["endpoints"] = strs(freeAddr(t))
	conf["image_factory"] = cty.StringVal(url)
	p := l.provider(t, conf)
	cfg := obj(map[string]cty.Value{"patches": strs("patches/node.yaml"), "first_install": cty.StringVal("nocloud")})
	pr := plan(p, talos.MachineConfig, cfg)
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	image := host + "/metal-installer/" + id + ":v1.13.3"
	for _, want := range []string{"installer image: " + image, "computed locally " + talos.ExtensionsSchematicID("siderolabs/i915")} {
		if !strings.Contains(pr.Diff, want) {
			t.Errorf("the plan lacks %q:\n%s", want, pr.Diff)
		}
	}
	if strings.Contains(pr.Diff, talos.FactoryHost) {
		t.Errorf("the plan names %s though the provider names another factory:\n%s", talos.FactoryHost, pr.Diff)
	}
	if got := pr.Outputs.GetAttr("installer_image"); !got.IsKnown() || got.AsString() != image {
		t.Errorf("installer_image = %#v, want %s", got, image)
	}
}
