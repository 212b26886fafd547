package incusapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultSocket is the daemon's unix socket when neither Options.Socket nor
// Options.URL is set (nor $INCUS_SOCKET / $INCUS_DIR).
const DefaultSocket = "/var/lib/incus/unix.socket"

// Options says how to reach the daemon.
type Options struct {
	Socket     string // unix socket path (default /var/lib/incus/unix.socket when URL is empty)
	URL        string // https://host:8443 (a bare host[:port] means https, port 8443)
	ClientCert []byte // PEM, for HTTPS
	ClientKey  []byte // PEM, for HTTPS
	ServerCert []byte // PEM: pin exactly this certificate (the server's own); empty: system roots
	Project    string // "" = the daemon's default project
}

// Client talks to one Incus daemon. It is safe for concurrent use and keeps
// its connections alive between calls.
type Client struct {
	http    *http.Client
	base    string // "http://incus" for the socket, "https://host:port" otherwise
	socket  string
	url     string
	project string
	certFP  string // SHA-256 of the client certificate, for messages
}

// New checks the options and builds a client; it does not connect yet.
func New(opts Options) (*Client, error) {
	c := &Client{project: opts.Project}
	tr := &http.Transport{
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 0, // operation waits are long polls
	}
	if opts.URL == "" {
		sock := opts.Socket
		if sock == "" {
			sock = os.Getenv("INCUS_SOCKET")
		}
		if sock == "" && os.Getenv("INCUS_DIR") != "" {
			sock = filepath.Join(os.Getenv("INCUS_DIR"), "unix.socket")
		}
		if sock == "" {
			sock = DefaultSocket
		}
		c.socket = sock
		c.base = "http://incus"
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
	} else {
		u, err := normalizeURL(opts.URL)
		if err != nil {
			return nil, err
		}
		c.url = u
		c.base = u
		cfg, fp, err := tlsConfig(opts, u)
		if err != nil {
			return nil, err
		}
		c.certFP = fp
		tr.TLSClientConfig = cfg
		tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// Target names the daemon: the socket path or the URL.
func (c *Client) Target() string {
	if c.socket != "" {
		return "unix://" + c.socket
	}
	return c.url
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func normalizeURL(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("incus: bad URL %q: %w", raw, err)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("incus: bad URL %q: only https:// is supported over the network (use Socket for the local daemon)", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("incus: bad URL %q: no host", raw)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "8443")
	}
	return "https://" + u.Host, nil
}

func fingerprint(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:])
}

func pemCertDER(data []byte, what string) ([]byte, error) {
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("incus: %s: no PEM CERTIFICATE block found", what)
		}
		if b.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(b.Bytes); err != nil {
				return nil, fmt.Errorf("incus: %s: %w", what, err)
			}
			return b.Bytes, nil
		}
	}
}

func tlsConfig(opts Options, u string) (*tls.Config, string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var certFP string
	switch {
	case len(opts.ClientCert) > 0 && len(opts.ClientKey) > 0:
		pair, err := tls.X509KeyPair(opts.ClientCert, opts.ClientKey)
		if err != nil {
			return nil, "", fmt.Errorf("incus: client certificate/key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		certFP = fingerprint(pair.Certificate[0])
	case len(opts.ClientCert) > 0 || len(opts.ClientKey) > 0:
		return nil, "", errors.New("incus: a client certificate needs both ClientCert and ClientKey")
	}
	if len(opts.ServerCert) > 0 {
		pinned, err := pemCertDER(opts.ServerCert, "pinned server certificate")
		if err != nil {
			return nil, "", err
		}
		want := fingerprint(pinned)
		// Exact match of the leaf, as the incus CLI does with servercerts/:
		// no chain, no hostname (the daemon's self-signed certificate).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &ServerCertError{URL: u, Expected: want, Err: errors.New("no certificate presented")}
			}
			if !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
				return &ServerCertError{URL: u, Got: fingerprint(cs.PeerCertificates[0].Raw), Expected: want,
					Err: errors.New("certificate mismatch")}
			}
			return nil
		}
	}
	return cfg, certFP, nil
}

// call is one request.
type call struct {
	method string
	path   string // starting with /1.0
	query  url.Values
	body   any
	etag   string
	// raw, when set, is sent as it is (application/octet-stream) instead
	// of body, with the extra headers: a file upload.
	raw     io.Reader
	headers map[string]string
}

func (c *Client) target(path string, q url.Values) string {
	if c.project != "" {
		if q == nil {
			q = url.Values{}
		}
		q.Set("project", c.project)
	}
	s := c.base + path
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// do sends a request and decodes the envelope. Errors: *StatusError for
// answers of type "error" or HTTP >= 400, *UntrustedError for 403 over
// HTTPS, *UnreachableError, *ServerCertError, or ctx's error wrapped.
func (c *Client) do(ctx context.Context, in call) (*response, http.Header, error) {
	var body io.Reader
	if in.body != nil {
		b, err := json.Marshal(in.body)
		if err != nil {
			return nil, nil, fmt.Errorf("incus: %s %s: encoding the request: %w", in.method, in.path, err)
		}
		body = bytes.NewReader(b)
	}
	if in.raw != nil {
		body = in.raw
	}
	req, err := http.NewRequestWithContext(ctx, in.method, c.target(in.path, in.query), body)
	if err != nil {
		return nil, nil, fmt.Errorf("incus: %s %s: %w", in.method, in.path, err)
	}
	switch {
	case in.raw != nil:
		req.Header.Set("Content-Type", "application/octet-stream")
	case body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range in.headers {
		req.Header.Set(k, v)
	}
	if in.etag != "" {
		etag := in.etag
		if !strings.HasPrefix(etag, `"`) {
			etag = `"` + etag + `"`
		}
		req.Header.Set("If-Match", etag)
	}
	req.Header.Set("User-Agent", "migrate-incusapi")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, c.transportError(ctx, in, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, c.transportError(ctx, in, err)
	}
	var r response
	if err := json.Unmarshal(raw, &r); err != nil {
		snippet := strings.TrimSpace(string(raw))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "..."
		}
		if resp.StatusCode == http.StatusForbidden && c.url != "" {
			return nil, nil, &UntrustedError{URL: c.url, Fingerprint: c.certFP, Message: snippet}
		}
		return nil, nil, &StatusError{StatusCode: resp.StatusCode, Method: in.method, Path: in.path,
			Message: "not an Incus API answer: " + snippet}
	}
	if r.Type == "error" || resp.StatusCode >= 400 {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		msg := r.Error
		if msg == "" {
			msg = http.StatusText(code)
		}
		se := &StatusError{StatusCode: code, Message: msg, Method: in.method, Path: in.path}
		if code == http.StatusForbidden && c.url != "" {
			return nil, nil, &UntrustedError{URL: c.url, Fingerprint: c.certFP, Message: msg, Err: se}
		}
		return nil, nil, se
	}
	return &r, resp.Header, nil
}

func (c *Client) transportError(ctx context.Context, in call, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("incus: %s %s: %w", in.method, in.path, ctx.Err())
	}
	var certErr *ServerCertError
	if errors.As(err, &certErr) {
		return certErr
	}
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	if errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) {
		return &ServerCertError{URL: c.url, Err: err}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return &UnreachableError{Socket: c.socket, URL: c.url, Err: opErr.Err}
	}
	return fmt.Errorf("incus: %s %s on %s: %w", in.method, in.path, c.Target(), err)
}

// get decodes a sync answer's metadata into out and returns the headers.
func (c *Client) get(ctx context.Context, path string, q url.Values, out any) (http.Header, error) {
	r, h, err := c.do(ctx, call{method: http.MethodGet, path: path, query: q})
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(r.Metadata, out); err != nil {
			return nil, fmt.Errorf("incus: GET %s: decoding the answer: %w", path, err)
		}
	}
	return h, nil
}

// mutate sends a request and, if the daemon answers with an operation,
// waits for it at once.
func (c *Client) mutate(ctx context.Context, in call, action string, force bool) error {
	r, _, err := c.do(ctx, in)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			se.Action, se.Force = action, force
		}
		return err
	}
	if r.Type != "async" {
		return nil
	}
	var op Operation
	_ = json.Unmarshal(r.Metadata, &op)
	if op.ID == "" {
		op.ID = r.Operation[strings.LastIndex(r.Operation, "/")+1:]
	}
	if op.ID == "" {
		return fmt.Errorf("incus: %s %s: async answer without an operation", in.method, in.path)
	}
	_, err = c.wait(ctx, op, in, action, force)
	return err
}

// wait long-polls /1.0/operations/{id}/wait until the operation ends. The
// wait uses timeout=-1: a timed-out wait is reported by the daemon exactly
// like a failed operation ("context deadline exceeded"), so the only end of
// a wait is the operation's, or ctx's (which cancels the request).
func (c *Client) wait(ctx context.Context, op Operation, in call, action string, force bool) (*Operation, error) {
	opPath := "/1.0/operations/" + url.PathEscape(op.ID)
	fail := func(code int, msg string) error {
		return &StatusError{StatusCode: code, Message: msg, Method: in.method, Path: in.path,
			Operation: op.ID, Action: action, Force: force}
	}
	for {
		r, _, err := c.do(ctx, call{method: http.MethodGet, path: opPath + "/wait", query: url.Values{"timeout": {"-1"}}})
		if err != nil {
			if ctx.Err() != nil {
				if op.MayCancel {
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					_, _, _ = c.do(cctx, call{method: http.MethodDelete, path: opPath})
					cancel()
				}
				return nil, fmt.Errorf("incus: %s %s: waiting for operation %s (%s): %w",
					in.method, in.path, op.ID, op.Description, ctx.Err())
			}
			var se *StatusError
			if !errors.As(err, &se) {
				return nil, fmt.Errorf("incus: %s %s: waiting for operation %s: %w", in.method, in.path, op.ID, err)
			}
			if se.StatusCode == http.StatusNotFound && strings.Contains(se.Message, "Operation not found") {
				return nil, fmt.Errorf("incus: %s %s: operation %s vanished before its result was read "+
					"(the daemon keeps finished operations ~5 s)", in.method, in.path, op.ID)
			}
			if se.Message == "context deadline exceeded" {
				// Ambiguous: a wait timeout or the operation's own failure.
				var cur Operation
				if _, gerr := c.get(ctx, opPath, nil, &cur); gerr == nil && cur.StatusCode < 200 {
					continue
				}
			}
			return nil, fail(se.StatusCode, se.Message)
		}
		var cur Operation
		if err := json.Unmarshal(r.Metadata, &cur); err != nil {
			return nil, fmt.Errorf("incus: %s %s: decoding operation %s: %w", in.method, in.path, op.ID, err)
		}
		switch cur.Status {
		case "Success":
			return &cur, nil
		case "Failure":
			msg := cur.Err
			if msg == "" {
				msg = "operation failed"
			}
			return &cur, fail(http.StatusBadRequest, msg)
		case "Cancelled":
			msg := "operation cancelled"
			if cur.Err != "" {
				msg += ": " + cur.Err
			}
			return &cur, fail(http.StatusBadRequest, msg)
		}
		if cur.StatusCode >= 200 { // an unknown final status
			return &cur, fail(http.StatusInternalServerError, "operation ended with status "+cur.Status+" "+cur.Err)
		}
		// Still running (should not happen with timeout=-1): wait again.
	}
}
