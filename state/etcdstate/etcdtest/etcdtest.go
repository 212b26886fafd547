package etcdtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homelab-migrate/migrate/state/etcdstate"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Options say what cluster to start.
type Options struct {
	Members int  // 1 or 3; 0 is 1
	TLS     bool // clients must use TLS with a client certificate
	Auth    bool // authentication on: Config uses the "migrate" user
}

// Password is the password of the harness's users.
const Password = "s3cret-etcd-Passw0rd"

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	dir     string
	opts    Options
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPath  string
	cert    string // the client's certificate and key
	key     string
	members []*member
}

type member struct {
	name      string
	client    string // host:port
	peer      string
	dataDir   string
	logPath   string
	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	args      []string
	restarted bool
}

// Binary returns the etcd binary to run, or why there is none.
func Binary() (string, error) {
	if b := os.Getenv("MIGRATE_ETCD_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("MIGRATE_ETCD_BIN: %w", err)
		}
		return b, nil
	}
	home, _ := os.UserHomeDir()
	found, _ := filepath.Glob(filepath.Join(home, ".cache", "migrate", "kube-v*", "etcd"))
	if len(found) == 0 {
		return "", fmt.Errorf("no etcd binary: run `make services` (lab/kubecp/build-kube.sh builds it into ~/.cache/migrate/kube-v*/etcd) or set MIGRATE_ETCD_BIN")
	}
	sort.Slice(found, func(i, j int) bool { return newer(found[i], found[j]) })
	return found[0], nil
}

// newer compares the kube-vX.Y.Z directories of two paths by version.
func newer(a, b string) bool {
	va, vb := version(a), version(b)
	for i := range min(len(va), len(vb)) {
		if va[i] != vb[i] {
			return va[i] > vb[i]
		}
	}
	return len(va) > len(vb)
}

func version(p string) []int {
	v := strings.TrimPrefix(filepath.Base(filepath.Dir(p)), "kube-v")
	var out []int
	for _, f := range strings.Split(v, ".") {
		n := 0
		fmt.Sscan(f, &n)
		out = append(out, n)
	}
	return out
}

// Start starts a cluster and waits until every member answers. It fails
// the test if it cannot.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Members == 0 {
		opts.Members = 1
	}
	c := &Cluster{t: t, bin: bin, dir: t.TempDir(), opts: opts}
	t.Cleanup(c.stopAll)
	if opts.TLS {
		c.makeCerts()
	}
	// A free port is free only until another process takes it (another
	// package's etcd, a test's client): a member that finds its port
	// taken is started again, with the whole cluster, on new ports.
	for attempt := 1; ; attempt++ {
		err := c.launch(attempt)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("etcd: a port was taken meanwhile; starting the cluster again on other ports (%v)", err)
		c.stopAll()
		c.members = nil
	}
	if opts.Auth {
		c.enableAuth()
	}
	return c
}

// launch starts the members on new ports, in data directories of this
// attempt, and waits until each answers.
func (c *Cluster) launch(attempt int) error {
	var initial []string
	for i := range c.opts.Members {
		m := &member{name: fmt.Sprintf("m%d", i), client: freePort(c.t), peer: freePort(c.t)}
		m.dataDir = filepath.Join(c.dir, fmt.Sprintf("%s.%d", m.name, attempt))
		m.logPath = m.dataDir + ".log"
		c.members = append(c.members, m)
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	scheme := "http"
	if c.opts.TLS {
		scheme = "https"
	}
	for _, m := range c.members {
		m.args = []string{
			"--name", m.name, "--data-dir", m.dataDir,
			"--listen-client-urls", scheme + "://" + m.client, "--advertise-client-urls", scheme + "://" + m.client,
			"--listen-peer-urls", "http://" + m.peer, "--initial-advertise-peer-urls", "http://" + m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", fmt.Sprintf("%s-%d", filepath.Base(c.dir), attempt), "--log-level", "warn",
		}
		if c.opts.TLS {
			m.args = append(m.args, "--cert-file", filepath.Join(c.dir, "server.pem"), "--key-file", filepath.Join(c.dir, "server-key.pem"),
				"--trusted-ca-file", c.caPath, "--client-cert-auth")
		}
		c.start(m)
	}
	for i := range c.members {
		if err := c.ready(i); err != nil {
			return err
		}
	}
	return nil
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (c *Cluster) start(m *member) {
	c.t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		c.t.Fatalf("starting etcd %s: %v", m.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
}

// waitReady waits until member i answers a read as a member of a cluster
// with a leader.
func (c *Cluster) waitReady(i int) {
	c.t.Helper()
	if err := c.ready(i); err != nil {
		c.t.Fatal(err)
	}
}

// ready is waitReady's wait, with its failure returned.
func (c *Cluster) ready(i int) error {
	m := c.members[i]
	cfg := c.rootConfig([]string{c.scheme() + m.client})
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			return fmt.Errorf("etcd %s exited: %s", m.name, tail(m.logPath))
		default:
		}
		last = func() error {
			cli, err := clientv3.New(cfg)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := cli.Status(ctx, cfg.Endpoints[0])
			if err != nil {
				return err
			}
			if st.Leader == 0 {
				return fmt.Errorf("no leader yet")
			}
			_, err = cli.Get(ctx, "health") // linearizable: the cluster has quorum
			return err
		}()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd %s not ready within 90s: %v\n%s", m.name, last, tail(m.logPath))
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (c *Cluster) scheme() string {
	if c.opts.TLS {
		return "https://"
	}
	return "http://"
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, c.scheme()+m.client)
	}
	return eps
}

// Config is a backend configuration for the cluster with a prefix of the
// test's own under "migrate/" (the prefix the "migrate" user may use).
func (c *Cluster) Config() etcdstate.Config {
	cfg := etcdstate.Config{
		Endpoints:   c.Endpoints(),
		Prefix:      "migrate/" + strings.NewReplacer("/", "-", " ", "_").Replace(c.t.Name()) + "/",
		DialTimeout: 5 * time.Second,
	}
	if c.opts.TLS {
		cfg.CA, cfg.Cert, cfg.Key = c.caPath, c.cert, c.key
	}
	if c.opts.Auth {
		cfg.Username, cfg.Password = "migrate", Password
	}
	return cfg
}

func (c *Cluster) rootConfig(eps []string) clientv3.Config {
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if c.opts.TLS {
		cfg.TLS = c.clientTLS()
	}
	if c.opts.Auth {
		// Before authentication is enabled, etcd ignores them.
		cfg.Username, cfg.Password = "root", Password
	}
	return cfg
}

// Client is a client of the whole cluster as root (as nobody when
// authentication is off), closed when the test ends.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cfg := c.rootConfig(c.Endpoints())
	cli, err := clientv3.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *Cluster) enableAuth() {
	c.t.Helper()
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", Password); return err },
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "migrate", Password); return err },
		func() error { _, err := cli.RoleAdd(ctx, "migrate"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "migrate", "migrate/", clientv3.GetPrefixRangeEnd("migrate/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "migrate", "migrate"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			c.t.Fatalf("setting up etcd authentication (step %d): %v", i, err)
		}
	}
}

// Kill kills member i (SIGKILL) and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.members[i]
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-exited
	m.mu.Lock()
	m.cmd = nil
	m.mu.Unlock()
}

// Restart starts member i again on its data directory. It waits until
// the member answers only when a quorum can be reached, which it may not
// be until enough members are back: use WaitReady then.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	c.Kill(i)
	m.args = replaceArg(m.args, "--initial-cluster-state", "existing")
	c.start(m)
}

// WaitReady waits until member i answers reads that need a quorum.
func (c *Cluster) WaitReady(i int) { c.t.Helper(); c.waitReady(i) }

func replaceArg(args []string, flag, value string) []string {
	for i := range args {
		if args[i] == flag && i+1 < len(args) {
			args[i+1] = value
		}
	}
	return args
}

func (c *Cluster) stopAll() {
	for i := range c.members {
		c.Kill(i)
	}
}

// ForeignCA writes a CA certificate that signed nothing of the cluster's
// (a TLS mismatch) and returns its path.
func ForeignCA(t testing.TB) string {
	t.Helper()
	ca, _ := newCA(t)
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	writePEM(t, path, "CERTIFICATE", ca.Raw)
	return path
}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "etcdtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func (c *Cluster) makeCerts() {
	c.ca, c.caKey = newCA(c.t)
	c.caPath = filepath.Join(c.dir, "ca.pem")
	writePEM(c.t, c.caPath, "CERTIFICATE", c.ca.Raw)
	c.issue("server", x509.ExtKeyUsageServerAuth)
	c.issue("client", x509.ExtKeyUsageClientAuth)
	c.cert, c.key = filepath.Join(c.dir, "client.pem"), filepath.Join(c.dir, "client-key.pem")
}

func (c *Cluster) issue(name string, usage x509.ExtKeyUsage) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		c.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		c.t.Fatal(err)
	}
	writePEM(c.t, filepath.Join(c.dir, name+".pem"), "CERTIFICATE", der)
	writePEM(c.t, filepath.Join(c.dir, name+"-key.pem"), "EC PRIVATE KEY", kder)
}

func (c *Cluster) clientTLS() *tls.Config {
	cert, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.ca)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	var b bytes.Buffer
	pem.Encode(&b, &pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}
