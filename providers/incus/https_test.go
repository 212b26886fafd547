package incus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
)

// certFiles writes a fresh client certificate and key into dir; trusted
// says whether to trust it first over the unix socket (removed at the end).
func certFiles(t *testing.T, c *incusapi.Client, dir string, trusted bool) (crt, key string) {
	t.Helper()
	certPEM, keyPEM := selfSigned(t)
	crt, key = filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if err := os.WriteFile(crt, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if trusted {
		if err := c.AddCertificate(ctxT(t, 20*time.Second), unique("migrate-test"), certPEM); err != nil {
			t.Fatalf("trusting the client certificate: %v", err)
		}
		fp, err := incusapi.CertificateFingerprint(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.DeleteCertificate(ctx, fp); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
	}
	return crt, key
}

// TestHTTPSClientCert: over HTTPS with a trusted client certificate, given
// as explicit paths and as a remote of the incus CLI's config, a stop and
// its rollback work.
func TestHTTPSClientCert(t *testing.T) {
	t.Parallel()
	c := client(t)
	dir := t.TempDir()
	crt, key := certFiles(t, c, dir, true)
	name := launch(t, c, "https", true, nil)

	explicit := provider(t, map[string]cty.Value{
		"address": str("https://" + testHTTPS), "client_cert": str(crt), "client_key": str(key), "server_cert": str(testServerCert),
	})
	s := newStep(t, explicit, incus.InstanceState, "over-https", map[string]cty.Value{"instance": str(name), "state": str("stopped")})
	wantContains(t, "the plan over HTTPS", s.mustPlan(nil).Diff, "~ stop instance")
	r := s.mustApply(nil, nil)
	if i := inst(t, c, name); i.Status != "Stopped" {
		t.Fatalf("status = %s", i.Status)
	}

	// The incus CLI's layout: config.yml, servercerts/NAME.crt, client.crt/key.
	if err := os.MkdirAll(filepath.Join(dir, "servercerts"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(testServerCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "servercerts", "myhost.crt"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	yml := "default-remote: local\nremotes:\n  myhost:\n    addr: https://" + testHTTPS + "\n    protocol: incus\n    auth_type: tls\n    public: false\n"
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := provider(t, map[string]cty.Value{"remote": str("myhost"), "config_dir": str(dir)})
	s2 := newStep(t, remote, incus.InstanceState, "over-https", map[string]cty.Value{"instance": str(name), "state": str("stopped")})
	if rr := s2.read(priorOf(r)); rr.Observation != providers.Present {
		t.Fatalf("Read through the remote: %v", rr.Observation)
	}
	s2.revert(r.Revert)
	if i := inst(t, c, name); i.Status != "Running" {
		t.Fatalf("status after rollback over HTTPS = %s", i.Status)
	}

	// An empty block follows the incus CLI's default remote, as `incus`
	// does: switched to myhost, the step goes over HTTPS.
	yml = strings.Replace(yml, "default-remote: local", "default-remote: myhost", 1)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	byDefault := provider(t, map[string]cty.Value{"config_dir": str(dir)})
	s3 := newStep(t, byDefault, incus.InstanceState, "over-https", map[string]cty.Value{"instance": str(name), "state": str("stopped")})
	wantContains(t, "the plan through the default remote", s3.mustPlan(nil).Diff, "~ stop instance")
	if err := os.Remove(filepath.Join(dir, "client.key")); err != nil {
		t.Fatal(err)
	}
	if d := incus.New().Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: obj(map[string]cty.Value{"config_dir": str(dir)})}).Diagnostics; !d.HasErrors() {
		t.Fatal("a default remote whose client key is gone was accepted")
	}

	// An unknown remote is a configuration error naming the known ones.
	p := incus.New()
	d := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: obj(map[string]cty.Value{"remote": str("nohost"), "config_dir": str(dir)})}).Diagnostics
	wantDiag(t, d, "Unknown Incus Remote", "nohost", "myhost", "incus remote list")
}

// TestHTTPSUntrusted: a certificate the server does not trust gives a
// clear error that says how to trust it.
func TestHTTPSUntrusted(t *testing.T) {
	t.Parallel()
	c := client(t)
	dir := t.TempDir()
	crt, key := certFiles(t, c, dir, false)
	p := provider(t, map[string]cty.Value{
		"address": str("https://" + testHTTPS), "client_cert": str(crt), "client_key": str(key), "server_cert": str(testServerCert),
	})
	s := newStep(t, p, incus.InstanceState, "untrusted", map[string]cty.Value{"instance": str("anything"), "state": str("stopped")})
	wantDiag(t, s.plan(nil).Diagnostics, "Client Certificate Not Trusted", "does not trust", "incus config trust add-certificate "+crt)
}

// TestUnreachable: no daemon behind the socket or the address. The first
// step to find it says where and what to check; the steps after it say
// so in one line, pointing at it.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	for _, cfg := range []map[string]cty.Value{
		{"socket": str(filepath.Join(t.TempDir(), "no.socket"))},
		{"address": str("https://127.0.0.1:1"), "server_cert": str(testServerCert)},
	} {
		p := provider(t, cfg)
		s := newStep(t, p, incus.Instance, "x", map[string]cty.Value{"type": str("container"), "image": str(testImage)})
		wantDiag(t, s.plan(nil).Diagnostics, "Incus Unreachable", "incus_instance.x cannot reach the Incus daemon", "incusd")
		for _, name := range []string{"y", "z"} {
			s := newStep(t, p, incus.Instance, name, map[string]cty.Value{"type": str("container"), "image": str(testImage)})
			d := s.plan(nil).Diagnostics
			wantDiag(t, d, "Incus Unreachable", "incus_instance."+name+": the Incus daemon at ", " did not answer (see incus_instance.x).")
			if strings.Contains(d.Err().Error(), "incusd") {
				t.Errorf("incus_instance.%s repeats the whole error: %v", name, d)
			}
		}
	}
}
