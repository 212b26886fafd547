package incus_test

import (
	"bytes"
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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
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
	isLab      bool // the host is the lab's (client says, once), not the daemon
)

// client returns an incusapi client on the local socket, failing the test
// when the daemon is not there.
func client(t testing.TB) *incusapi.Client {
	t.Helper()
	incustest.Hold(t)
	opts := incusapi.Options{Socket: incustest.Socket}
	if os.Getenv("INCUS_CONF") != "" {
		// The lab (lab/cmd/incus-lab): over HTTPS, through the default
		// remote of its incus CLI configuration, as the provider's default.
		var err error
		if opts, err = incusapi.RemoteOptions("", ""); err != nil {
			t.Fatalf("the incus CLI configuration of INCUS_CONF: %v", err)
		}
	}
	c, err := incusapi.New(opts)
	if err != nil {
		t.Fatalf("incusapi.New: %v", err)
	}
	daemonOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var s *incusapi.Server
		s, daemonErr = c.Server(ctx)
		if daemonErr == nil {
			isLab = strings.HasSuffix(s.Environment.ServerVersion, "-lab") // lab/incushost's "6.0-lab"
		}
		if daemonErr == nil && s.Auth != "trusted" {
			daemonErr = &incusapi.UntrustedError{URL: c.Target()}
		}
		if daemonErr == nil {
			_, _, daemonErr = imageCheck(ctx, c)
		}
	})
	if daemonErr != nil {
		t.Fatalf("the Incus daemon is not usable (%v): run scripts/incus-up.sh (as `make test` does) first", daemonErr)
	}
	t.Cleanup(c.Close)
	return c
}

// imageCheck makes sure the test image is there by creating nothing: a
// container that is deleted at once.
func imageCheck(ctx context.Context, c *incusapi.Client) (string, string, error) {
	name := unique("probe")
	err := c.CreateInstance(ctx, incusapi.InstancesPost{Name: name, Type: "container",
		Source: incusapi.InstanceSource{Type: "image", Alias: testImage}})
	if err != nil {
		return "", "", err
	}
	return "", "", c.DeleteInstance(ctx, name)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// unique makes an instance name no other test (or run) uses.
func unique(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "mt-" + prefix + "-" + hex.EncodeToString(b)
}

// launch creates a container from the test image (started if start),
// force-deleted when the test ends.
func launch(t testing.TB, c *incusapi.Client, prefix string, start bool, config map[string]string) string {
	t.Helper()
	name := unique(prefix)
	req := incusapi.InstancesPost{
		Name:        name,
		Type:        "container",
		Source:      incusapi.InstanceSource{Type: "image", Alias: testImage},
		InstancePut: incusapi.InstancePut{Config: config, Description: "migrate incus provider test"},
		Start:       start,
	}
	if err := c.CreateInstance(ctxT(t, 60*time.Second), req); err != nil {
		t.Fatalf("CreateInstance %s: %v", name, err)
	}
	cleanupInstance(t, c, name)
	if start {
		waitInit(t, c, name)
	}
	return name
}

// sigPWR is SIGPWR's bit in /proc/PID/status's signal masks (signal 30).
const sigPWR = 1 << (30 - 1)

// waitInit waits until the container's init catches SIGPWR, the signal of
// a graceful stop. PID 1 ignores a signal it has no handler for, so a
// stop sent before the image's init ran its trap hangs to the timeout,
// and the forced stop that follows can be answered while the container
// runs on (seen twice under load in TestRunbookRunAndRollback). A test
// means a running guest, as a real old VM is. The lab's host runs no
// init of the image: nothing to wait for there.
func waitInit(t testing.TB, c *incusapi.Client, name string) {
	t.Helper()
	if isLab {
		return
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out := execIn(t, c, name, "grep", "SigCgt", "/proc/1/status")
		if f := strings.Fields(out); code == 0 && len(f) == 2 {
			if mask, err := strconv.ParseUint(f[1], 16, 64); err == nil && mask&sigPWR != 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the init of %s did not catch SIGPWR within 60s: %q (exit %d)", name, out, code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanupInstance force-deletes an instance when the test ends.
func cleanupInstance(t testing.TB, c *incusapi.Client, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.SetState(ctx, name, incusapi.InstanceStatePut{Action: "stop", Force: true}); err != nil &&
			!incusapi.IsAlreadyInState(err) && !incusapi.IsNotFound(err) {
			t.Logf("cleanup: force stop %s: %v", name, err)
		}
		if err := c.DeleteInstance(ctx, name); err != nil && !incusapi.IsNotFound(err) {
			t.Logf("cleanup: delete %s: %v", name, err)
		}
	})
}

// slowStop makes a container ignore the graceful shutdown signal, so that
// a graceful stop lasts until its timeout.
var slowStop = map[string]string{"raw.lxc": "lxc.signal.halt=SIGUSR1"}

func inst(t testing.TB, c *incusapi.Client, name string) *incusapi.Instance {
	t.Helper()
	i, _, err := c.Instance(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("Instance %s: %v", name, err)
	}
	return i
}

func snapshots(t testing.TB, c *incusapi.Client, name string) []string {
	t.Helper()
	list, err := c.Snapshots(ctxT(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("Snapshots %s: %v", name, err)
	}
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

// provider returns a configured provider; cfg nil is the default block.
func provider(t testing.TB, cfg map[string]cty.Value) *incus.Provider {
	t.Helper()
	p := incus.New()
	v := cty.EmptyObjectVal
	if cfg != nil {
		v = cty.ObjectVal(cfg)
	}
	if d := p.Configure(context.Background(), providers.ConfigureRequest{Name: "test", Config: v, Dir: t.TempDir()}).Diagnostics; d.HasErrors() {
		t.Fatalf("Configure: %v", d.Err())
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func obj(m map[string]cty.Value) cty.Value { return cty.ObjectVal(m) }
func str(s string) cty.Value               { return cty.StringVal(s) }

func strMap(m map[string]string) cty.Value {
	if len(m) == 0 {
		return cty.MapValEmpty(cty.String)
	}
	out := map[string]cty.Value{}
	for k, v := range m {
		out[k] = cty.StringVal(v)
	}
	return cty.MapVal(out)
}

func devMap(m map[string]map[string]string) cty.Value {
	out := map[string]cty.Value{}
	for k, v := range m {
		out[k] = strMap(v)
	}
	return cty.MapVal(out)
}

// step is one step under test: the provider, its type, address and config.
type step struct {
	t    testing.TB
	p    *incus.Provider
	typ  string
	addr phases.Address
	cfg  cty.Value
}

func newStep(t testing.TB, p *incus.Provider, typ, name string, cfg map[string]cty.Value) *step {
	return &step{t: t, p: p, typ: typ, addr: phases.Address{Type: typ, Name: name}, cfg: obj(cfg)}
}

func (s *step) plan(prior *providers.Prior) providers.PlanResponse {
	s.t.Helper()
	return s.p.Plan(ctxT(s.t, 60*time.Second), providers.PlanRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Prior: prior, Action: providers.Create})
}

func (s *step) mustPlan(prior *providers.Prior) providers.PlanResponse {
	s.t.Helper()
	r := s.plan(prior)
	if err := r.Diagnostics.Err(); err != nil {
		s.t.Fatalf("Plan %s: %v", s.addr, err)
	}
	return r
}

func (s *step) apply(ctx context.Context, planned []byte, prior *providers.Prior) (providers.ApplyResponse, string) {
	s.t.Helper()
	var log bytes.Buffer
	r := s.p.Apply(ctx, providers.ApplyRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Planned: planned, Prior: prior, Log: &log})
	return r, log.String()
}

func (s *step) mustApply(planned []byte, prior *providers.Prior) providers.ApplyResponse {
	s.t.Helper()
	r, log := s.apply(ctxT(s.t, 120*time.Second), planned, prior)
	if err := r.Diagnostics.Err(); err != nil {
		s.t.Fatalf("Apply %s: %v\nlog:\n%s", s.addr, err, log)
	}
	s.t.Logf("Apply %s log:\n%s", s.addr, log)
	return r
}

func (s *step) read(prior *providers.Prior) providers.ReadResponse {
	s.t.Helper()
	r := s.p.Read(ctxT(s.t, 60*time.Second), providers.ReadRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Prior: prior})
	if err := r.Diagnostics.Err(); err != nil {
		s.t.Fatalf("Read %s: %v", s.addr, err)
	}
	return r
}

func (s *step) revert(inv *providers.RevertData) providers.RevertResponse {
	s.t.Helper()
	if inv == nil {
		s.t.Fatalf("Revert %s: no revert data", s.addr)
	}
	var log bytes.Buffer
	r := s.p.Revert(ctxT(s.t, 120*time.Second), providers.RevertRequest{Type: s.typ, Addr: s.addr, Config: s.cfg, Revert: *inv, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		s.t.Fatalf("Revert %s: %v\nlog:\n%s", s.addr, err, log.String())
	}
	s.t.Logf("Revert %s log:\n%s", s.addr, log.String())
	return r
}

func priorOf(r providers.ApplyResponse) *providers.Prior {
	return &providers.Prior{Outputs: r.Outputs, Private: r.Private, Revert: r.Revert}
}

func wantContains(t testing.TB, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("%s does not contain %q:\n%s", what, s, text)
		}
	}
}

func wantDiag(t testing.TB, d phases.Diagnostics, summary string, details ...string) {
	t.Helper()
	for _, x := range d {
		if x.Severity == phases.Error && x.Summary == summary {
			wantContains(t, "diagnostic "+summary, x.Detail, details...)
			return
		}
	}
	t.Errorf("no error diagnostic %q in %v", summary, d)
}

// selfSigned returns a fresh self-signed ECDSA client certificate and key.
func selfSigned(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: unique("client"), Organization: []string{"migrate tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
