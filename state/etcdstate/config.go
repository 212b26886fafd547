package etcdstate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config says where the state lives.
type Config struct {
	Endpoints []string
	// Prefix is required, e.g. "migrate/homelab/"; keys live under it (a
	// "/" is added when it does not end with one).
	Prefix string
	// CA, Cert, Key are PEM file paths: CA alone is TLS with server
	// verification; Cert and Key add a client certificate.
	CA, Cert, Key string
	// Username, Password: etcd authentication. Password is a secret: it is
	// never logged nor put in an error.
	Username, Password string
	// Insecure allows a password over plaintext gRPC (a test cluster on
	// a trusted network): without it, a password needs TLS.
	Insecure    bool
	LockTTL     time.Duration // 0: 30s
	DialTimeout time.Duration // 0: 5s
}

// String describes c without its password, so that printing a Config
// (%v, %+v) never shows the secret.
func (c Config) String() string {
	pw := ""
	if c.Password != "" {
		pw = " password=(sensitive)"
	}
	return fmt.Sprintf("etcd{endpoints=%v prefix=%q ca=%q cert=%q key=%q username=%q%s insecure=%t lock_ttl=%v dial_timeout=%v}",
		c.Endpoints, c.Prefix, c.CA, c.Cert, c.Key, c.Username, pw, c.Insecure, c.LockTTL, c.DialTimeout)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

const (
	defaultLockTTL     = 30 * time.Second
	defaultDialTimeout = 5 * time.Second
)

// Validate says what is wrong with c, if anything.
func (c Config) Validate() error {
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New(`no endpoints: set endpoints, e.g. ["https://10.0.0.5:2379"]`))
	}
	for _, ep := range c.Endpoints {
		if strings.TrimSpace(ep) == "" || strings.ContainsAny(ep, " \t\n,") {
			errs = append(errs, fmt.Errorf("endpoint %q is not host:port or a URL", ep))
		}
	}
	if strings.Trim(c.Prefix, "/") == "" {
		errs = append(errs, fmt.Errorf(`prefix %q: set a prefix of its own for this state, e.g. "migrate/homelab/"`, c.Prefix))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("cert and key go together: set both (a client certificate and its key) or neither"))
	}
	if (c.Username == "") != (c.Password == "") {
		errs = append(errs, errors.New("username and password go together: set both or neither"))
	}
	if c.Password != "" && c.Plaintext() && !c.Insecure {
		errs = append(errs, fmt.Errorf("a password over plaintext gRPC (%s): anyone on the network path reads it, and the state: "+
			"give the cluster's CA certificate in ca (and https:// endpoints), or, for a test cluster on a trusted network, say insecure = true (in a URL, &insecure=true)",
			strings.Join(c.Endpoints, ", ")))
	}
	if c.LockTTL < 0 || (c.LockTTL > 0 && c.LockTTL < 2*time.Second) {
		errs = append(errs, fmt.Errorf("lock_ttl %v: use at least 2s (etcd's shortest lease)", c.LockTTL))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("dial timeout %v is negative", c.DialTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("etcd backend: %w", err)
	}
	return nil
}

// prefix is c.Prefix ending with "/".
func (c Config) prefix() string {
	if strings.HasSuffix(c.Prefix, "/") {
		return c.Prefix
	}
	return c.Prefix + "/"
}

func (c Config) lockTTL() time.Duration {
	if c.LockTTL == 0 {
		return defaultLockTTL
	}
	return c.LockTTL
}

func (c Config) dialTimeout() time.Duration {
	if c.DialTimeout == 0 {
		return defaultDialTimeout
	}
	return c.DialTimeout
}

// requestTimeout bounds one request: a cluster without quorum never
// answers a write, and the caller must hear about it.
func (c Config) requestTimeout() time.Duration { return 2 * c.dialTimeout() }

func (c Config) where() string {
	return fmt.Sprintf("etcd %s, prefix %q", strings.Join(c.Endpoints, ","), c.prefix())
}

// Plaintext says whether the client speaks to the cluster without TLS:
// none is asked for (no ca, no cert, no https:// endpoint), or the first
// endpoint says http:// or unix://: the etcd client dials every member
// with what the first endpoint's scheme asks, whatever else is set.
func (c Config) Plaintext() bool {
	if len(c.Endpoints) == 0 {
		return false
	}
	first := c.Endpoints[0]
	if strings.HasPrefix(first, "http://") || strings.HasPrefix(first, "unix://") {
		return true
	}
	asked := c.CA != "" || c.Cert != ""
	for _, ep := range c.Endpoints {
		asked = asked || strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://")
	}
	return !asked
}

func (c Config) tlsConfig() (*tls.Config, error) {
	https := false
	for _, ep := range c.Endpoints {
		https = https || strings.HasPrefix(ep, "https://")
	}
	if c.CA == "" && c.Cert == "" && !https {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("etcd backend: ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd backend: ca %s holds no PEM certificate", c.CA)
		}
	}
	if c.Cert != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("etcd backend: cert %s, key %s: %w", c.Cert, c.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// connect returns a client that has answered one read of the prefix.
func (c Config) connect(ctx context.Context) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.dialTimeout(),
		TLS:         tlsCfg,
		Username:    c.Username,
		Password:    c.Password,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return nil, c.explain(ctx, err, tlsCfg)
	}
	rctx, cancel := context.WithTimeout(ctx, c.dialTimeout())
	defer cancel()
	if _, err := cli.Get(rctx, c.prefix()+keyHead); err != nil {
		cli.Close()
		return nil, c.explain(ctx, err, tlsCfg)
	}
	return cli, nil
}

// explain turns a client error into one that says what to do.
func (c Config) explain(ctx context.Context, err error, tlsCfg *tls.Config) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("%s: authentication failed for user %q: wrong username or password", c.where(), c.Username)
	case errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return fmt.Errorf("%s: the cluster requires authentication: set username and password", c.where())
	case errors.Is(err, rpctypes.ErrPermissionDenied) && c.Username == "":
		return fmt.Errorf("%s: permission denied: the cluster requires authentication: set username and password (or use a client certificate whose CN is a user allowed the prefix)", c.where())
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("%s: user %q may not read or write the keys under the prefix: grant its role readwrite on the prefix", c.where(), c.Username)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", c.where(), ctx.Err())
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.DeadlineExceeded && s.Code() != codes.Unavailable {
		return fmt.Errorf("%s: %v", c.where(), err)
	}
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Unavailable {
		return fmt.Errorf("%s: %v", c.where(), err)
	}
	return fmt.Errorf("%s: no answer within %v: %s", c.where(), c.dialTimeout(), c.diagnose(tlsCfg))
}

// diagnose connects to each endpoint to say why none answered.
func (c Config) diagnose(tlsCfg *tls.Config) string {
	var order []string
	eps := map[string][]string{} // reason -> endpoints
	for _, ep := range c.Endpoints {
		why := probe(ep, tlsCfg)
		if _, ok := eps[why]; !ok {
			order = append(order, why)
		}
		eps[why] = append(eps[why], ep)
	}
	if len(order) == 1 && order[0] == "" {
		return "every endpoint accepts connections: the cluster may have lost its quorum (a majority of members must be up)"
	}
	var out []string
	for _, why := range order {
		say := why
		if say == "" {
			say = "accepts connections"
		}
		out = append(out, strings.Join(eps[why], ", ")+": "+say)
	}
	msg := "tried " + strings.Join(out, "; ")
	if _, ok := eps[""]; ok {
		msg += "; has the cluster lost its quorum (a majority of members must be up)?"
	}
	return msg
}

// probe says what is wrong with endpoint ep, "" if nothing is seen.
func probe(ep string, tlsCfg *tls.Config) string {
	host := ep
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	host = strings.TrimSuffix(host, "/")
	conn, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return unwrapNet(err).Error()
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	cfg := &tls.Config{InsecureSkipVerify: true} // only to see whether it speaks TLS
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	err = tls.Client(conn, cfg).Handshake()
	switch {
	case tlsCfg == nil && err == nil:
		return "speaks TLS: set ca (and cert and key if it asks for a client certificate)"
	case tlsCfg != nil && err != nil:
		return fmt.Sprintf("TLS handshake failed: %v (check ca, cert and key)", err)
	}
	return ""
}

func unwrapNet(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
