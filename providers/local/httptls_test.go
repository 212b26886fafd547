package local_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/providers/local"
)

// TestHTTPCheckCA: an https:// URL whose server has a certificate of its
// own CA passes with ca naming that CA, and fails, saying the certificate
// is not trusted and what to do, without ca or with another CA; contains
// looks into the body (a .well-known delegation).
func TestHTTPCheckCA(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/matrix/server" {
			w.Write([]byte(`{"m.server": "matrix.example.org:443"}`))
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	write := func(name string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", srv.Certificate().Raw) // httptest's certificate is its own CA
	write("other-ca.pem", otherCA(t))
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := configured(t, local.New(), dir)
	check := func(path string, extra map[string]cty.Value) cty.Value {
		m := map[string]cty.Value{"url": cty.StringVal(srv.URL + path), "interval": cty.StringVal("50ms"), "timeout": cty.StringVal("1s")}
		for k, v := range extra {
			m[k] = v
		}
		return obj(m)
	}
	ca := func(f string) map[string]cty.Value { return map[string]cty.Value{"ca": cty.StringVal(f)} }

	t.Run("trusted by ca", func(t *testing.T) {
		t.Parallel()
		mustApply(t, p, "http_check", check("/", ca("ca.pem")), io.Discard)
	})
	t.Run("delegation", func(t *testing.T) {
		t.Parallel()
		mustApply(t, p, "http_check", check("/.well-known/matrix/server", map[string]cty.Value{
			"ca": cty.StringVal("ca.pem"), "contains": cty.StringVal(`"m.server": "matrix.example.org:443"`)}), io.Discard)
		r := apply(context.Background(), p, "http_check", "wk", check("/.well-known/matrix/server", map[string]cty.Value{
			"ca": cty.StringVal("ca.pem"), "contains": cty.StringVal("other.example.org:8448")}), io.Discard)
		wantErr(t, r.Diagnostics, "http_check.wk", "status 200 with a body", `does not contain "other.example.org:8448"`)
	})
	t.Run("no ca", func(t *testing.T) {
		t.Parallel()
		r := apply(context.Background(), p, "http_check", "fed", check("/", nil), io.Discard)
		wantErr(t, r.Diagnostics, "http_check.fed", "the server's certificate is not trusted", `not by a CA the system trusts`, `ca = "FILE.pem"`)
	})
	t.Run("another ca", func(t *testing.T) {
		t.Parallel()
		r := apply(context.Background(), p, "http_check", "fed", check("/", ca("other-ca.pem")), io.Discard)
		wantErr(t, r.Diagnostics, "http_check.fed", "the server's certificate is not trusted", "not by the CA of ca = other-ca.pem")
	})
	t.Run("bad ca files", func(t *testing.T) {
		t.Parallel()
		r := apply(context.Background(), p, "http_check", "fed", check("/", ca("missing.pem")), io.Discard)
		wantErr(t, r.Diagnostics, `"ca"`, "missing.pem", "cannot be read")
		r = apply(context.Background(), p, "http_check", "fed", check("/", ca("key.pem")), io.Discard)
		wantErr(t, r.Diagnostics, `"ca"`, "key.pem", "PRIVATE KEY", "BEGIN CERTIFICATE")
	})
	t.Run("validation", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			cfg  cty.Value
			want []string
		}{
			{obj(map[string]cty.Value{"url": cty.StringVal("http://example.test/"), "ca": cty.StringVal("ca.pem")}), []string{`"ca"`, "https://"}},
			{check("/", map[string]cty.Value{"ca": cty.StringVal("ca.pem"), "insecure": cty.True}), []string{`"ca"`, `"insecure"`, "remove one"}},
			{check("/", map[string]cty.Value{"contains": cty.StringVal("")}), []string{`"contains"`, "empty"}},
		} {
			wantErr(t, plan(p, "http_check", tt.cfg).Diagnostics, tt.want...)
		}
	})
	t.Run("plan", func(t *testing.T) {
		t.Parallel()
		r := plan(p, "http_check", obj(map[string]cty.Value{"url": cty.StringVal("https://example.test/.well-known/matrix/server"),
			"ca": cty.StringVal("lab/ca.pem"), "contains": cty.StringVal("example.test:443")}))
		want := "GET https://example.test/.well-known/matrix/server until it answers 200 (timeout 60s, every 1s) with a body containing \"example.test:443\"\nca: the certificate must chain to lab/ca.pem"
		if r.Diff != want {
			t.Errorf("diff %q, want %q", r.Diff, want)
		}
	})
}

// otherCA is a CA certificate that signed nothing the test server has.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "another CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}
