package factory_test

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/homelab-migrate/migrate/lab/factory"
	"github.com/homelab-migrate/migrate/providers/talos"
)

// The IDs of REAL-SERVERS.md, checked with image-factory's own package.
const (
	emptyID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	i915ID  = "dc8730aa8cc7bfa5ef7e2b3284248f2631135b2faf4ae11aa997a0c1987b0eee"
	i915    = "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/i915\n"
)

func serve(t *testing.T) (*factory.Factory, string) {
	t.Helper()
	f := factory.New(factory.Options{})
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func do(t *testing.T, method, url, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func register(t *testing.T, url, yaml string) string {
	t.Helper()
	code, _, b := do(t, "POST", url+"/schematics", yaml)
	if code != http.StatusCreated {
		t.Fatalf("POST /schematics: %d %s", code, b)
	}
	var got struct{ ID, Schematic string }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("POST /schematics answered %s: %v", b, err)
	}
	return got.ID
}

// The factory's ID is the provider's, computed apart, and the known ones.
func TestSchematicIDsAgreeWithProviderAndKnownIDs(t *testing.T) {
	_, url := serve(t)
	for _, c := range []struct{ yaml, want string }{
		{"customization: {}\n", emptyID},
		{"", emptyID},
		{i915, i915ID},
		{"customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/i915]\n", i915ID}, // any layout, one ID
	} {
		got := register(t, url, c.yaml)
		if got != c.want {
			t.Errorf("POST /schematics %q: id %s, want %s", c.yaml, got, c.want)
		}
		local, err := talos.SchematicID(c.yaml)
		if err != nil || local != got {
			t.Errorf("provider's SchematicID(%q) = %s, %v; the factory's %s", c.yaml, local, err, got)
		}
	}
	for _, ext := range [][]string{{"siderolabs/i915"}, {"siderolabs/i915", "siderolabs/intel-ucode"}, {"siderolabs/iscsi-tools"}} {
		y := "customization:\n  systemExtensions:\n    officialExtensions: [" + strings.Join(ext, ", ") + "]\n"
		if got, want := register(t, url, y), talos.ExtensionsSchematicID(ext...); got != want {
			t.Errorf("%v: factory %s, provider %s", ext, got, want)
		}
	}
	withArgs := register(t, url, "customization:\n  extraKernelArgs: [net.ifnames=0]\n  systemExtensions:\n    officialExtensions: [siderolabs/i915]\n")
	if withArgs == i915ID {
		t.Error("kernel arguments did not change the schematic ID")
	}
}

func TestRefusesWhatTheFactoryRefuses(t *testing.T) {
	_, url := serve(t)
	for _, body := range []string{"customization:\n  systemExtension: {}\n", "not: [yaml", "customisation: {}\n"} {
		if code, _, b := do(t, "POST", url+"/schematics", body); code != http.StatusBadRequest {
			t.Errorf("POST /schematics %q: %d %s, want 400", body, code, b)
		}
	}
	if code, _, _ := do(t, "GET", url+"/schematics/"+i915ID, ""); code != http.StatusNotFound {
		t.Errorf("an unregistered schematic: %d, want 404", code)
	}
	if code, _, _ := do(t, "GET", url+"/image/"+i915ID+"/v1.13.3/metal-amd64.iso", ""); code != http.StatusNotFound {
		t.Errorf("the image of an unregistered schematic: %d, want 404", code)
	}
	id := register(t, url, i915)
	for path, want := range map[string]int{
		"/image/" + id + "/v1.12.0/metal-amd64.iso":             http.StatusNotFound,
		"/image/" + id + "/v1.13.3/metal-amd64.raw.zst":         http.StatusNotFound,
		"/v2/metal-installer/" + id + "/manifests/v1.12.0":      http.StatusNotFound,
		"/v2/metal-installer/" + emptyID + "/manifests/v1.13.3": http.StatusNotFound,
		"/v2/metal-installer/" + id + "/manifests/v1.13.3":      http.StatusOK,
		"/v2/metal-installer/" + id + "/manifests/v1.14.1":      http.StatusOK,
	} {
		if code, _, b := do(t, "HEAD", url+path, ""); code != want {
			t.Errorf("HEAD %s: %d %s, want %d", path, code, b, want)
		}
	}
	bad := register(t, url, "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/no-such]\n")
	if code, _, b := do(t, "GET", url+"/image/"+bad+"/v1.13.3/metal-amd64.iso", ""); code != http.StatusBadRequest || !strings.Contains(string(b), "siderolabs/no-such") {
		t.Errorf("an unknown extension: %d %s, want 400 naming it", code, b)
	}
}

func TestVersionsAndImages(t *testing.T) {
	f, url := serve(t)
	code, _, b := do(t, "GET", url+"/versions", "")
	var versions []string
	if code != http.StatusOK || json.Unmarshal(b, &versions) != nil || !slices.Equal(versions, factory.DefaultVersions) {
		t.Fatalf("GET /versions: %d %s", code, b)
	}
	id := register(t, url, i915)
	if _, ok := f.Extensions(id); !ok {
		t.Error("the registered schematic is unknown to Extensions")
	}
	code, h, iso := do(t, "GET", url+"/image/"+id+"/v1.13.3/metal-amd64.iso", "")
	if code != http.StatusOK || len(iso) != factory.ISOSize || h.Get("Content-Length") != "1048576" {
		t.Fatalf("GET the ISO: %d, %d bytes, Content-Length %q", code, len(iso), h.Get("Content-Length"))
	}
	if code, h, b := do(t, "HEAD", url+"/image/"+id+"/v1.13.3/metal-amd64.iso", ""); code != http.StatusOK || len(b) != 0 || h.Get("Content-Length") != "1048576" {
		t.Errorf("HEAD the ISO: %d, %d bytes, Content-Length %q", code, len(b), h.Get("Content-Length"))
	}
	path := filepath.Join(t.TempDir(), "talos.iso")
	os.WriteFile(path, iso, 0o644)
	got, err := factory.ReadISO(path)
	if err != nil || got.Version != "v1.13.3" || got.SchematicID != id || got.Arch != "amd64" || strings.Join(got.Extensions(), ",") != "siderolabs/i915" {
		t.Fatalf("ReadISO: %+v, %v", got, err)
	}

	other := register(t, url, "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/iscsi-tools]\n")
	_, _, iso2 := do(t, "GET", url+"/image/"+other+"/v1.13.3/metal-amd64.iso", "")
	_, _, iso3 := do(t, "GET", url+"/image/"+id+"/v1.14.1/metal-amd64.iso", "")
	sums := map[[32]byte]bool{sha256.Sum256(iso): true, sha256.Sum256(iso2): true, sha256.Sum256(iso3): true}
	if len(sums) != 3 {
		t.Error("another schematic or version gave the same ISO")
	}
	if got.Platform != "metal" {
		t.Errorf("the metal ISO's platform: %q", got.Platform)
	}

	// The nocloud ISO, at the factory's path: it reads its config from
	// a cidata drive; another platform is not built.
	code, _, nc := do(t, "GET", url+"/image/"+id+"/v1.13.3/nocloud-amd64.iso", "")
	if code != http.StatusOK || len(nc) != factory.ISOSize || sha256.Sum256(nc) == sha256.Sum256(iso) {
		t.Fatalf("GET the nocloud ISO: %d, %d bytes", code, len(nc))
	}
	os.WriteFile(path, nc, 0o644)
	if got, err := factory.ReadISO(path); err != nil || got.Platform != "nocloud" || got.SchematicID != id {
		t.Errorf("ReadISO of the nocloud ISO: %+v, %v", got, err)
	}
	if code, _, _ := do(t, "GET", url+"/image/"+id+"/v1.13.3/aws-amd64.iso", ""); code != http.StatusNotFound {
		t.Errorf("GET aws-amd64.iso: %d, want 404", code)
	}
}

func TestNoHeaderNoBootableMedium(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{"empty.iso": nil, "other.iso": []byte("CD001 not a lab image\n")} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, content, 0o644)
		if _, err := factory.ReadISO(p); err == nil || !strings.Contains(err.Error(), "no bootable medium") {
			t.Errorf("%s: %v, want no bootable medium", name, err)
		}
	}
}

// TestOwnerChangesTheID: a factory that adds an owner stores it, answers
// the ID of what it stores (not of what was posted), and serves images
// and installers by that ID alone.
func TestOwnerChangesTheID(t *testing.T) {
	t.Parallel()
	f := factory.New(factory.Options{Owner: "homelab"})
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)

	id := register(t, srv.URL, i915)
	want := factory.Schematic{Owner: "homelab"}
	want.Customization.SystemExtensions.OfficialExtensions = []string{"siderolabs/i915"}
	wantID, err := want.ID()
	if err != nil {
		t.Fatal(err)
	}
	if id == i915ID || id != wantID {
		t.Fatalf("POST /schematics answered %s, want %s (the posted schematic's is %s)", id, wantID, i915ID)
	}
	code, _, body := do(t, "GET", srv.URL+"/schematics/"+id, "")
	if code != http.StatusOK || !strings.Contains(string(body), "owner: homelab") {
		t.Errorf("GET /schematics/%s: %d %s", id, code, body)
	}
	for path, wantCode := range map[string]int{
		"/image/" + id + "/v1.13.3/metal-amd64.iso":            http.StatusOK,
		"/image/" + i915ID + "/v1.13.3/metal-amd64.iso":        http.StatusNotFound,
		"/v2/metal-installer/" + id + "/manifests/v1.13.3":     http.StatusOK,
		"/v2/metal-installer/" + i915ID + "/manifests/v1.13.3": http.StatusNotFound,
	} {
		if code, _, b := do(t, "HEAD", srv.URL+path, ""); code != wantCode {
			t.Errorf("HEAD %s: %d %s, want %d", path, code, b, wantCode)
		}
	}
	if ext, ok := f.Extensions(id); !ok || len(ext) != 1 || ext[0] != "siderolabs/i915" {
		t.Errorf("Extensions(%s) = %v, %v", id, ext, ok)
	}
}
