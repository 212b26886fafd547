package incusapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/homelab-migrate/migrate/providers/incus/internal/incustest"
)

// The tests run against the real daemon started by scripts/incus-up.sh
// (which `make test` calls). They never skip: no daemon is a failure.

var (
	testImage      = incustest.Image
	testHTTPS      = incustest.HTTPS
	testServerCert = incustest.ServerCert
)

var (
	daemonOnce sync.Once
	daemonErr  error
)

type tb interface {
	Helper()
	Fatalf(string, ...any)
	Cleanup(func())
	Name() string
	Logf(string, ...any)
}

// socketClient returns a client on the local unix socket, failing the test
// (never skipping) when the daemon is not there.
func socketClient(t tb) *Client {
	t.Helper()
	incustest.Hold(t)
	c, err := New(Options{Socket: incustest.Socket})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	daemonOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s *Server
		s, daemonErr = c.Server(ctx)
		if daemonErr == nil && s.Auth != "trusted" {
			daemonErr = &UntrustedError{URL: c.Target()}
		}
	})
	if daemonErr != nil {
		t.Fatalf("the Incus daemon is not reachable (%v): run scripts/incus-up.sh (as `make test` does) first", daemonErr)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t tb, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// launch creates a container from the test image (started if start) and
// force-deletes it when the test ends.
func launch(t tb, c *Client, prefix string, start bool, config map[string]string) string {
	t.Helper()
	name := uniqueName(prefix)
	req := InstancesPost{
		Name:        name,
		Type:        "container",
		Source:      InstanceSource{Type: "image", Alias: testImage},
		InstancePut: InstancePut{Config: config, Description: "migrate incusapi test"},
		Start:       start,
	}
	if err := c.CreateInstance(ctxT(t, 60*time.Second), req); err != nil {
		t.Fatalf("CreateInstance %s: %v", name, err)
	}
	t.Cleanup(func() { forceDelete(t, c, name) })
	return name
}

func forceDelete(t tb, c *Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.SetState(ctx, name, InstanceStatePut{Action: "stop", Force: true}); err != nil &&
		!IsAlreadyInState(err) && !IsNotFound(err) {
		t.Logf("cleanup: force stop %s: %v", name, err)
	}
	if err := c.DeleteInstance(ctx, name); err != nil && !IsNotFound(err) {
		t.Logf("cleanup: delete %s: %v", name, err)
	}
}

func status(t tb, c *Client, name string) string {
	t.Helper()
	st, err := c.InstanceState(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("InstanceState %s: %v", name, err)
	}
	return st.Status
}

// selfSigned returns a fresh self-signed ECDSA P-256 certificate and key (PEM).
func selfSigned(t tb, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("key: %v", err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"migrate tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("cert: %v", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// trustedCert makes a client certificate, trusts it over the unix socket and
// removes it from the trust store when the test ends.
func trustedCert(t tb, c *Client) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM = selfSigned(t, uniqueName("migrate-incusapi-test"))
	name := uniqueName("migrate-incusapi-test")
	if err := c.AddCertificate(ctxT(t, 20*time.Second), name, certPEM); err != nil {
		t.Fatalf("AddCertificate: %v", err)
	}
	fp, err := CertificateFingerprint(certPEM)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.DeleteCertificate(ctx, fp); err != nil {
			t.Logf("cleanup: delete certificate %s: %v", name, err)
		}
	})
	return certPEM, keyPEM
}

func serverCertPEM(t tb) []byte {
	t.Helper()
	b, err := os.ReadFile(testServerCert)
	if err != nil {
		t.Fatalf("reading the server certificate: %v (run scripts/incus-up.sh)", err)
	}
	return b
}

func incusCLI(t tb, args ...string) {
	t.Helper()
	out, err := exec.Command("incus", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("incus %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
