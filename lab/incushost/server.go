package incushost

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Dir holds everything: instances/, images/, storage/, certs/ and the
	// server's certificate. Created when absent.
	Dir string
	// BootVM boots a virtual machine whose disk is an ISO volume when it is
	// started; nil refuses to start such a VM.
	BootVM func(ctx context.Context, spec VMSpec) (Guest, error)
	// Seed creates the lab-base image and the three old VMs (services,
	// matrix, k3s) when absent.
	Seed bool
	// OldHost, if set, makes the seeded old VMs Debian hosts with the
	// apps installed as their packaging installs them (debian.go); nil
	// keeps the busybox layout of seed.go.
	OldHost *OldHost
	// Network is the one managed network (default "labbr0").
	Network string
	// LAN, if set, is a bridge of the host to the home's LAN (IncusOS
	// names it after its interface, e.g. "enp5s0"): listed unmanaged; a
	// NIC with nictype bridged and this parent is on the LAN (see lan.go).
	LAN string
	// LANPhysical, if set with LAN, names a managed network of type
	// physical over the LAN bridge, as IncusOS lists after its
	// direct-attach tutorial: a NIC with network = LANPhysical is on the
	// LAN too (see lan.go).
	LANPhysical string
	// LANLease is the LAN's DHCP server (the home router): the address it
	// gives a NIC of this MAC, "" for none. A VM booted with a NIC on the
	// LAN boots at that address; Incus reports none.
	LANLease func(mac string) string
	// Pools are the storage pools the host has (default ["default"], as
	// the test daemon; IncusOS names its own "local" and "data"). The
	// first is the default profile's root disk pool.
	Pools []string
	// AddressBlock B: instances get addresses of 127.B.0.0/16 (0, the
	// default: 127.0.1.1 on). Labs side by side on one machine take
	// different blocks, or their Talos VMs' ports meet.
	AddressBlock int
	// OperationTTL is how long a finished operation stays readable (default 5 s,
	// as the real daemon).
	OperationTTL time.Duration
	// Hardware is what /1.0/resources reports (nil: no GPU, no disk, the
	// machine's CPU count) and the pools' sizes.
	Hardware *Hardware
	// Logf, if set, is told what the server does.
	Logf func(format string, args ...any)
	// OnExec, if set, is called with each command the server starts in
	// an instance (POST exec, once the command runs), for a record of the
	// effects made in the instances (lab/home's events log).
	OnExec func(instance string, command []string)
}

// Server is the lab's Incus host.
type Server struct {
	opts Options
	dir  string

	mu        sync.Mutex
	instances map[string]*instance
	volumes   map[string]*volume // "pool/name"
	profiles  map[string]*profile
	trusted   map[string][]byte // fingerprint -> DER
	nextIP    int

	ops        *operations
	hub        eventHub    // GET /1.0/events
	tokens     trustTokens // trust.go
	httpsAddrs []string    // where ServeHTTPS listens
	// execSocks are the websocket execs waiting for or using their
	// streams, by operation ID (execws.go).
	execSocks map[string]*execSockets

	cert     tls.Certificate
	certPEM  []byte
	servers  []*http.Server
	closing  bool
	handler  http.Handler
	closeCtx context.Context
	cancel   context.CancelFunc
}

// New opens (or creates) the lab host in opts.Dir.
func New(opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("incushost: Options.Dir is empty")
	}
	if opts.Network == "" {
		opts.Network = "labbr0"
	}
	if len(opts.Pools) == 0 {
		opts.Pools = []string{"default"}
	}
	for i, p := range opts.Pools {
		if p == "" || strings.Contains(p, "/") || slices.Contains(opts.Pools[:i], p) {
			return nil, fmt.Errorf("incushost: Options.Pools %q: pool names are distinct and have no \"/\"", opts.Pools)
		}
	}
	if opts.AddressBlock < 0 || opts.AddressBlock > 255 {
		return nil, fmt.Errorf("incushost: Options.AddressBlock %d is not in 0-255", opts.AddressBlock)
	}
	if opts.OperationTTL == 0 {
		opts.OperationTTL = 5 * time.Second
	}
	if opts.OldHost != nil {
		h := *opts.OldHost
		if err := h.defaults(); err != nil {
			return nil, err
		}
		opts.OldHost = &h
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"instances", "images", "storage", "certs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("incushost: %w", err)
		}
	}
	s := &Server{opts: opts, dir: dir, instances: map[string]*instance{}, volumes: map[string]*volume{},
		trusted: map[string][]byte{}, nextIP: 1}
	s.closeCtx, s.cancel = context.WithCancel(context.Background())
	s.ops = newOperations(opts.OperationTTL)
	s.ops.notify = func(op operation) { s.hub.publish("operation", op) }
	if err := s.loadCert(); err != nil {
		return nil, err
	}
	if err := s.loadProfiles(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if opts.Seed {
		if err := s.seed(); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	// What ran when the last process ended starts again, as the daemon
	// restarts the instances it stopped with it: containers get a new
	// init, VMs booting an ISO boot again (their node from its disk).
	for _, in := range s.instances {
		if in.Running && in.init == nil && in.guest == nil {
			in.Running = false
			if err := s.startLocked(in); err != nil {
				s.logf("incus lab: %s: %v; it is stopped", in.Name, err)
			}
		}
	}
	s.mu.Unlock()
	s.handler = s.routes()
	return s, nil
}

type logWriter struct{ s *Server }

func (w logWriter) Write(p []byte) (int, error) {
	w.s.logf("incus lab: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// Handler is the API, for tests that serve it themselves. Requests
// without TLS are trusted (as the unix socket is).
func (s *Server) Handler() http.Handler { return s.handler }

// CertPEM is the server's certificate, to pin (INCUS_SERVER_CERT).
func (s *Server) CertPEM() []byte { return s.certPEM }

// Serve answers on a unix socket (trusted, as the daemon's) until Close.
func (s *Server) Serve(socket string) error {
	_ = os.Remove(socket)
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return err
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	return s.serve(l, nil)
}

// ServeHTTPS answers on addr (host:port) with the server's certificate;
// clients are trusted by their certificate (AddTrusted, or POST
// /1.0/certificates). It returns once listening.
func (s *Server) ServeHTTPS(addr string) (net.Addr, error) {
	cfg := &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	l, err := tls.Listen("tcp", addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("incushost: %w", err)
	}
	s.mu.Lock()
	s.httpsAddrs = append(s.httpsAddrs, l.Addr().String())
	s.mu.Unlock()
	go s.serve(l, cfg) //nolint:errcheck // ends with Close
	return l.Addr(), nil
}

// Listen is Serve on a socket that it returns at once.
func (s *Server) Listen(socket string) error {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	go s.serve(l, nil) //nolint:errcheck // ends with Close
	return nil
}

func (s *Server) serve(l net.Listener, _ *tls.Config) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: log.New(logWriter{s}, "", 0)} // an untrusted TLS client is no news
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving, kills every running command and stops the VMs'
// guests. The instances keep their state on disk; a Debian VM's services
// are stopped first, as the daemon stops its instances when it shuts down.
func (s *Server) Close() error {
	s.shutdownDebianVMs()
	s.mu.Lock()
	s.closing = true
	srvs := s.servers
	var guests []Guest
	for _, in := range s.instances {
		in.killExecs()
		if in.guest != nil {
			guests = append(guests, in.guest)
			in.guest = nil
		}
	}
	s.mu.Unlock()
	s.cancel()
	for _, srv := range srvs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
		_ = srv.Close()
	}
	for _, g := range guests {
		_ = g.Stop()
	}
	return nil
}

// AddTrusted trusts a client certificate (PEM) for HTTPS.
func (s *Server) AddTrusted(certPEM []byte) error {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return errors.New("incushost: AddTrusted: no PEM certificate")
	}
	return s.trust(b.Bytes)
}

func (s *Server) trust(der []byte) error {
	if _, err := x509.ParseCertificate(der); err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	fp := fingerprint(der)
	s.mu.Lock()
	s.trusted[fp] = der
	s.mu.Unlock()
	return os.WriteFile(filepath.Join(s.dir, "certs", fp+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func fingerprint(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// isTrusted: the socket always; HTTPS by the client certificate.
func (s *Server) isTrusted(r *http.Request) bool {
	if r.TLS == nil {
		return true
	}
	if len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.trusted[fingerprint(r.TLS.PeerCertificates[0].Raw)]
	return ok
}

// loadCert reads or makes the server's self-signed certificate (names
// 127.0.0.1, ::1, localhost, as the daemon's), and the trusted clients.
func (s *Server) loadCert() error {
	crt, key := filepath.Join(s.dir, "server.crt"), filepath.Join(s.dir, "server.key")
	if _, err := os.Stat(crt); err != nil {
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			return err
		}
		serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
		tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{Organization: []string{"migrate lab"}, CommonName: "root@incus-lab"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
	}
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		return fmt.Errorf("incushost: the server certificate: %w", err)
	}
	s.cert = pair
	s.certPEM, _ = os.ReadFile(crt)
	certs, _ := filepath.Glob(filepath.Join(s.dir, "certs", "*.crt"))
	for _, f := range certs {
		b, _ := os.ReadFile(f)
		if p, _ := pem.Decode(b); p != nil {
			s.trusted[fingerprint(p.Bytes)] = p.Bytes
		}
	}
	return nil
}

// The answers: the daemon's envelope.

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func syncOK(w http.ResponseWriter, meta any) {
	writeJSON(w, http.StatusOK, map[string]any{"type": "sync", "status": "Success", "status_code": 200, "metadata": meta})
}

func fail(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]any{"type": "error", "error": fmt.Sprintf(format, args...), "error_code": code, "metadata": nil})
}

// apiError is an error with the HTTP status it is answered with.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errf(code int, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

func failErr(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		fail(w, ae.code, "%s", ae.msg)
		return
	}
	fail(w, http.StatusInternalServerError, "%v", err)
}

// recursive reports whether a listing asks for objects (?recursion=1 or
// more) rather than their URLs.
func recursive(r *http.Request) bool {
	q := r.URL.Query().Get("recursion")
	return q != "" && q != "0"
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /1.0", s.getServer)
	mux.HandleFunc("GET /1.0/{$}", s.getServer)
	s.instanceRoutes(mux)
	s.opRoutes(mux)
	s.volumeRoutes(mux)
	s.profileRoutes(mux)
	s.cliRoutes(mux)
	mux.HandleFunc("GET /1.0/events", s.getEvents)
	s.sftpRoutes(mux)
	mux.HandleFunc("GET /1.0/operations/{id}/websocket", s.opWebsocket)
	mux.HandleFunc("POST /1.0/certificates", s.postCertificate)
	mux.HandleFunc("GET /1.0/certificates", s.getCertificates)
	mux.HandleFunc("DELETE /1.0/certificates/{fp}", s.deleteCertificate)
	mux.HandleFunc("GET /1.0/resources", s.getResources)
	mux.HandleFunc("GET /1.0/storage-pools/{pool}/resources", s.getPoolResources)
	mux.HandleFunc("GET /1.0/networks", s.listNetworks)
	mux.HandleFunc("GET /1.0/networks/{name}", s.getNetwork)
	mux.HandleFunc("GET /1.0/networks/{name}/leases", s.getLeases)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := r.URL.Path == "/1.0" || r.URL.Path == "/1.0/" ||
			r.Method == http.MethodPost && r.URL.Path == "/1.0/certificates" // a trust token's use
		if !open && !s.isTrusted(r) {
			fail(w, http.StatusForbidden, "not authorized")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) {
	meta := map[string]any{"api_version": "1.0", "api_status": "stable", "public": false,
		"auth_methods": []string{"tls"}, "auth": "untrusted",
		"api_extensions": apiExtensions}
	if s.isTrusted(r) {
		meta["auth"] = "trusted"
		meta["environment"] = map[string]any{
			"addresses": s.addresses(), "architectures": []string{"x86_64"},
			"certificate": string(s.certPEM), "certificate_fingerprint": fingerprint(s.cert.Certificate[0]),
			"driver": "lab", "driver_version": "1", "kernel": "Linux", "server": "incus",
			"server_name": "incus-lab", "server_pid": os.Getpid(), "server_version": "6.0-lab",
			"storage": "dir", "project": "default",
		}
	}
	syncOK(w, meta)
}

func (s *Server) getCertificates(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	var out []string
	for fp := range s.trusted {
		out = append(out, "/1.0/certificates/"+fp)
	}
	s.mu.Unlock()
	syncOK(w, out)
}

func (s *Server) deleteCertificate(w http.ResponseWriter, r *http.Request) {
	fp := r.PathValue("fp")
	s.mu.Lock()
	_, ok := s.trusted[fp]
	delete(s.trusted, fp)
	s.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "Certificate not found")
		return
	}
	_ = os.Remove(filepath.Join(s.dir, "certs", fp+".crt"))
	syncOK(w, map[string]any{})
}

// addresses are where the host answers over HTTPS.
func (s *Server) addresses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string{}, s.httpsAddrs...)
}
