package talos_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/talos"
)

var imageAddr = phases.Address{Type: talos.Image, Name: "iso"}

// imageProvider is a talos provider whose image_factory is url.
func imageProvider(t *testing.T, dir, url, version string, extensions ...string) *talos.Provider {
	t.Helper()
	p := talos.New()
	t.Cleanup(func() { _ = p.Close() })
	cfg := map[string]cty.Value{"version": cty.StringVal(version), "image_factory": cty.StringVal(url)}
	if len(extensions) > 0 {
		cfg["extensions"] = strs(extensions...)
	}
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "node", Dir: dir, Config: cty.ObjectVal(cfg)})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p
}

func imageConfig(path string) cty.Value {
	return obj(map[string]cty.Value{"path": cty.StringVal(path), "arch": cty.NullVal(cty.String)})
}

func fetch(t *testing.T, p *talos.Provider, cfg cty.Value, prior *providers.Prior) (providers.ApplyResponse, string) {
	t.Helper()
	var log bytes.Buffer
	r := p.Apply(context.Background(), providers.ApplyRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior, Log: &log})
	return r, log.String()
}

func outStr(v cty.Value, name string) string { return v.GetAttr(name).AsString() }

func TestImageFromTheFactory(t *testing.T) {
	t.Parallel()
	f := factory.New(factory.Options{})
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()

	p := imageProvider(t, dir, srv.URL, "v1.13.3", "siderolabs/i915")
	cfg := imageConfig("images/talos.iso")
	pr := p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Action: providers.Create})
	if err := pr.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan: %v", err)
	}
	i915 := talos.ExtensionsSchematicID("siderolabs/i915")
	for _, want := range []string{"register schematic " + i915, "extensions: siderolabs/i915", "metal-installer/" + i915 + ":v1.13.3",
		srv.URL + "/image/" + i915 + "/v1.13.3/metal-amd64.iso", filepath.Join(dir, "images/talos.iso")} {
		if !strings.Contains(pr.Diff, want) {
			t.Errorf("the plan does not say %q:\n%s", want, pr.Diff)
		}
	}

	r, log := fetch(t, p, cfg, nil)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply: %v\n%s", err, log)
	}
	path := filepath.Join(dir, "images/talos.iso")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := outStr(r.Outputs, "sha256"); got != hex.EncodeToString(sum[:]) || outStr(r.Outputs, "path") != path ||
		outStr(r.Outputs, "schematic_id") != i915 || outStr(r.Outputs, "version") != "v1.13.3" {
		t.Errorf("outputs %#v, file sha256 %x", r.Outputs, sum)
	}
	if n, _ := r.Outputs.GetAttr("size").AsBigFloat().Int64(); n != factory.ISOSize || len(b) != factory.ISOSize {
		t.Errorf("size output %d, file %d bytes, want %d", n, len(b), factory.ISOSize)
	}
	iso, err := factory.ReadISO(path)
	if err != nil || iso.Version != "v1.13.3" || iso.SchematicID != i915 {
		t.Errorf("the ISO downloaded boots %+v (%v)", iso, err)
	}
	for _, want := range []string{"schematic " + i915 + " registered", "installer " + strings.TrimPrefix(srv.URL, "http://") + "/metal-installer/" + i915 + ":v1.13.3 exists",
		"downloading " + srv.URL + "/image/", "downloaded 100% (1048576 bytes, sha256 " + hex.EncodeToString(sum[:])} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, " of 1048576 bytes)"); n < 2 {
		t.Errorf("the log has %d progress lines, want some:\n%s", n, log)
	}
	if _, ok := f.Extensions(i915); !ok {
		t.Error("the schematic was not registered with the factory")
	}

	// Done once: the recorded checksum matches, nothing is fetched.
	prior := &providers.Prior{Outputs: r.Outputs}
	rd := p.Read(context.Background(), providers.ReadRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior})
	if rd.Observation != providers.Present {
		t.Errorf("Read after the download: %v %s %v", rd.Observation, rd.Detail, rd.Diagnostics.Err())
	}
	pr = p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior, Action: providers.Update})
	if !strings.Contains(pr.Diff, "nothing to download") || !strings.Contains(pr.Diff, "1048576 bytes, sha256 "+hex.EncodeToString(sum[:])) {
		t.Errorf("the plan after the download: %s %v", pr.Diff, pr.Diagnostics.Err())
	}
	r2, log := fetch(t, p, cfg, prior)
	if r2.Diagnostics.HasErrors() || !strings.Contains(log, "nothing to fetch") || strings.Contains(log, "downloading") {
		t.Errorf("a second apply: %v\n%s", r2.Diagnostics.Err(), log)
	}

	// A file changed under the step is drift, and is fetched again.
	os.WriteFile(path, []byte("tampered"), 0o644)
	if rd := p.Read(context.Background(), providers.ReadRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Prior: prior}); rd.Observation != providers.Drifted {
		t.Errorf("Read of a changed ISO: %v %s", rd.Observation, rd.Detail)
	}
	if r3, log := fetch(t, p, cfg, prior); r3.Diagnostics.HasErrors() || !strings.Contains(log, "downloading") || outStr(r3.Outputs, "sha256") != hex.EncodeToString(sum[:]) {
		t.Errorf("the apply after drift: %v\n%s", r3.Diagnostics.Err(), log)
	}

	// Another extension set: another schematic, another ISO.
	p2 := imageProvider(t, dir, srv.URL, "v1.13.3", "siderolabs/iscsi-tools")
	r4, log := fetch(t, p2, imageConfig("images/other.iso"), nil)
	if err := r4.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply of another schematic: %v\n%s", err, log)
	}
	if id := outStr(r4.Outputs, "schematic_id"); id == i915 || id != talos.ExtensionsSchematicID("siderolabs/iscsi-tools") {
		t.Errorf("another extension set gave schematic %s", id)
	}
	if outStr(r4.Outputs, "sha256") == outStr(r.Outputs, "sha256") {
		t.Error("another schematic gave the same ISO")
	}
}

func TestImageRefusals(t *testing.T) {
	t.Parallel()
	f := factory.New(factory.Options{})
	good := httptest.NewServer(f.Handler())
	t.Cleanup(good.Close)
	// A factory whose IDs are not the provider's, and that serves no
	// installer of the ID it answers.
	liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/schematics" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"0000000000000000000000000000000000000000000000000000000000000000"}`))
			return
		}
		f.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(liar.Close)
	// A factory without the installer: its registry side answers 404.
	noInstaller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/") {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		f.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(noInstaller.Close)

	for _, c := range []struct {
		name, url, version string
		want               []string
	}{
		{"another ID, no installer of it", liar.URL, "v1.13.3", []string{"Installer Not Found", "/metal-installer/0000000000000000000000000000000000000000000000000000000000000000:v1.13.3", "Nothing was downloaded"}},
		{"a missing version", good.URL, "v1.13.0", []string{"Talos Version Not Offered", "Talos v1.13.0", "v1.13.3, v1.14.1", "Pin a version it offers"}},
		{"no installer", noInstaller.URL, "v1.13.3", []string{"Installer Not Found", "metal-installer/", "404"}},
		{"no factory", "http://127.0.0.1:1", "v1.13.3", []string{"Cannot Reach Image Factory", "image_factory"}},
	} {
		dir := t.TempDir()
		p := imageProvider(t, dir, c.url, c.version, "siderolabs/i915")
		r, _ := fetch(t, p, imageConfig("talos.iso"), nil)
		err := r.Diagnostics.Err()
		if err == nil {
			t.Errorf("%s: the apply succeeded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error does not say %q: %v", c.name, w, err)
			}
		}
		if _, serr := os.Stat(filepath.Join(dir, "talos.iso")); serr == nil {
			t.Errorf("%s: a file was written", c.name)
		}
	}
	// The plan already refuses a version the factory does not build.
	p := imageProvider(t, t.TempDir(), good.URL, "v1.13.0", "siderolabs/i915")
	if pr := p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: imageConfig("talos.iso"), Action: providers.Create}); !strings.Contains(pr.Diagnostics.Err().Error(), "Talos Version Not Offered") {
		t.Errorf("the plan of a missing version: %v", pr.Diagnostics.Err())
	}
}

// platform = "nocloud" fetches the factory's nocloud ISO, which reads its
// first config from the VM's config drive.
func TestImageNocloudPlatform(t *testing.T) {
	t.Parallel()
	f := factory.New(factory.Options{})
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	p := imageProvider(t, dir, srv.URL, "v1.13.3", "siderolabs/i915")
	cfg := obj(map[string]cty.Value{"path": cty.StringVal("talos.iso"), "platform": cty.StringVal("nocloud")})
	pr := p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: cfg, Action: providers.Create})
	i915 := talos.ExtensionsSchematicID("siderolabs/i915")
	if err := pr.Diagnostics.Err(); err != nil || !strings.Contains(pr.Diff, "/image/"+i915+"/v1.13.3/nocloud-amd64.iso") {
		t.Fatalf("Plan: %v\n%s", err, pr.Diff)
	}
	if r, log := fetch(t, p, cfg, nil); r.Diagnostics.HasErrors() {
		t.Fatalf("Apply: %v\n%s", r.Diagnostics.Err(), log)
	}
	if iso, err := factory.ReadISO(filepath.Join(dir, "talos.iso")); err != nil || iso.Platform != "nocloud" {
		t.Errorf("the ISO downloaded: %+v (%v)", iso, err)
	}
	bad := obj(map[string]cty.Value{"path": cty.StringVal("talos.iso"), "platform": cty.StringVal("aws")})
	if r := p.Plan(context.Background(), providers.PlanRequest{Type: talos.Image, Addr: imageAddr, Config: bad, Action: providers.Create}); !strings.Contains(fmt.Sprint(r.Diagnostics.Err()), `must be "metal" or "nocloud"`) {
		t.Errorf("platform = \"aws\": %v", r.Diagnostics.Err())
	}
}
