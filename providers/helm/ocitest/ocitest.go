package ocitest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
)

// Options say how the registry is reached.
type Options struct {
	// Username and Password, both set, make the registry require them.
	Username, Password string
	// TLS makes it serve HTTPS with a certificate of CAFile's CA.
	TLS bool
}

// Registry is a running registry.
type Registry struct {
	// Host is its address, 127.0.0.1:PORT.
	Host string
	// CAFile is the PEM file of the CA its certificate is from (TLS only).
	CAFile string

	t    testing.TB
	opts Options
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary is the registry program: $MIGRATE_REGISTRY_BIN, else
// docker-registry on PATH.
func Binary() (string, error) {
	if b := os.Getenv("MIGRATE_REGISTRY_BIN"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("docker-registry")
	if err != nil {
		return "", fmt.Errorf("no docker-registry program: install Debian's docker-registry package (scripts/registry-up.sh; make services runs it) or set MIGRATE_REGISTRY_BIN")
	}
	return b, nil
}

// Start starts a registry and waits until it answers /v2/. Another
// process taking its port between the pick and the bind makes it start
// again on another, up to three times.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{t: t, opts: opts, dir: t.TempDir()}
	if opts.TLS {
		r.makeCerts()
	}
	if opts.Username != "" {
		r.writeHtpasswd()
	}
	for attempt := 1; ; attempt++ {
		err := r.launch(bin)
		if err == nil {
			return r
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
	}
}

var errPortTaken = errors.New("port taken")

func (r *Registry) launch(bin string) error {
	r.Host = freePort(r.t)
	config := filepath.Join(r.dir, "config.yml")
	if err := os.WriteFile(config, []byte(r.config()), 0o600); err != nil {
		r.t.Fatal(err)
	}
	logPath := filepath.Join(r.dir, "registry.log")
	log, err := os.Create(logPath)
	if err != nil {
		r.t.Fatal(err)
	}
	defer log.Close()
	r.cmd = exec.Command(bin, "serve", config)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	dieWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	r.t.Cleanup(r.stop)
	return r.waitReady(logPath)
}

// config is the registry's configuration: storage in its directory,
// access logs off (nothing of a request's headers is written anyway).
func (r *Registry) config() string {
	var b strings.Builder
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	fmt.Fprintf(&b, "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n")
	fmt.Fprintf(&b, "storage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\n", filepath.Join(r.dir, "data"))
	fmt.Fprintf(&b, "http:\n  addr: %s\n  secret: %s\n", r.Host, hex.EncodeToString(secret))
	if r.opts.TLS {
		fmt.Fprintf(&b, "  tls:\n    certificate: %s\n    key: %s\n", filepath.Join(r.dir, "server.pem"), filepath.Join(r.dir, "server-key.pem"))
	}
	if r.opts.Username != "" {
		fmt.Fprintf(&b, "auth:\n  htpasswd:\n    realm: ocitest\n    path: %s\n", filepath.Join(r.dir, "htpasswd"))
	}
	return b.String()
}

// waitReady waits until /v2/ answers (401 when it asks for credentials).
func (r *Registry) waitReady(logPath string) error {
	client := r.httpClient()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(r.scheme() + "://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		select {
		case <-r.done:
			out, _ := os.ReadFile(logPath)
			if bytes.Contains(out, []byte("address already in use")) {
				return errPortTaken
			}
			return fmt.Errorf("the registry exited before it answered:\n%s", out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("the registry on %s did not answer /v2/ within a minute (last error %v):\n%s", r.Host, err, out)
		}
	}
}

// stop ends the registry: TERM, then KILL after a grace period.
func (r *Registry) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func (r *Registry) scheme() string {
	if r.opts.TLS {
		return "https"
	}
	return "http"
}

// Ref is the oci:// reference of a chart repository in the registry.
func (r *Registry) Ref(repository string) string {
	return "oci://" + r.Host + "/" + repository
}

// Push packages the chart in dir, changed by edit (nil: as it is), and
// pushes it to repository (its last element the chart's name) under its
// version, as helm push does; it returns the manifest's digest.
func (r *Registry) Push(t testing.TB, dir, repository string, edit func(*chart.Chart)) string {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(ch)
	}
	archive, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.client(t).Push(data, fmt.Sprintf("%s/%s:%s", r.Host, repository, ch.Metadata.Version)) // a "+" goes as "_", as Helm pushes it
	if err != nil {
		t.Fatalf("pushing chart %s to %s: %v", ch.Metadata.Name, r.Host, err)
	}
	return res.Manifest.Digest
}

// client is Helm's registry client with the registry's credentials.
func (r *Registry) client(t testing.TB) *registry.Client {
	opts := []registry.ClientOption{
		registry.ClientOptWriter(io.Discard),
		registry.ClientOptHTTPClient(r.httpClient()),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")),
	}
	if r.opts.Username != "" {
		opts = append(opts, registry.ClientOptBasicAuth(r.opts.Username, r.opts.Password))
	}
	if !r.opts.TLS {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	c, err := registry.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (r *Registry) httpClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.opts.TLS {
		pool := x509.NewCertPool()
		b, err := os.ReadFile(r.CAFile)
		if err != nil || !pool.AppendCertsFromPEM(b) {
			r.t.Fatalf("the registry's CA %s: %v", r.CAFile, err)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

func (r *Registry) writeHtpasswd() {
	hash, err := bcrypt.GenerateFromPassword([]byte(r.opts.Password), bcrypt.MinCost)
	if err != nil {
		r.t.Fatal(err)
	}
	line := r.opts.Username + ":" + string(hash) + "\n"
	if err := os.WriteFile(filepath.Join(r.dir, "htpasswd"), []byte(line), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// makeCerts makes a CA (CAFile) and the registry's certificate for
// 127.0.0.1 from it.
func (r *Registry) makeCerts() {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ocitest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		r.t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		r.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		r.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		r.t.Fatal(err)
	}
	r.CAFile = filepath.Join(r.dir, "ca.pem")
	writePEM(r.t, r.CAFile, "CERTIFICATE", caDER)
	writePEM(r.t, filepath.Join(r.dir, "server.pem"), "CERTIFICATE", der)
	writePEM(r.t, filepath.Join(r.dir, "server-key.pem"), "EC PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
