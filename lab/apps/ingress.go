package apps

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Route is one path of an Ingress rule as an ingress controller serves
// it (lab/kubecp reads them from the cluster: Container.Routes).
type Route struct {
	Namespace, Ingress string
	Host               string // "" for any host; "*.example.org" for one label
	Path               string
	Exact              bool // pathType Exact; Prefix and ImplementationSpecific are prefixes
	// Certificate is the one spec.tls names for Host, from its Secret;
	// nil when the Ingress has no TLS for Host.
	Certificate *tls.Certificate
	// Backend is the address (podIP:targetPort) of a Ready pod of the
	// path's Service, looked up at each request as the controller's
	// endpoints are; an error when it has none.
	Backend func(ctx context.Context) (string, error)
}

// matches says whether the route serves host and path.
func (r Route) matches(host, p string) bool {
	if !r.servesHost(host) {
		return false
	}

	if r.Exact {
		return p == r.Path
	}

	// Prefix: by path elements, "/foo" matches "/foo/bar", not "/foobar".
	prefix := strings.TrimSuffix(r.Path, "/")

	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// servesHost says whether the rule is for host ("" for any, a wildcard
// for one label).
func (r Route) servesHost(host string) bool {
	if r.Host == "" || r.Host == host {
		return true
	}

	label, rest, ok := strings.Cut(host, ".")

	return strings.HasPrefix(r.Host, "*.") && ok && label != "" && rest == r.Host[2:]
}

// route is the route of host and path: the longest path wins, Exact
// before Prefix at the same length; nil for none.
func route(routes []Route, host, p string) *Route {
	var best *Route

	for i, r := range routes {
		if !r.matches(host, p) {
			continue
		}

		if best == nil || len(r.Path) > len(best.Path) || (len(r.Path) == len(best.Path) && r.Exact && !best.Exact) {
			best = &routes[i]
		}
	}

	return best
}

// The ingress-nginx controller: the Ingresses of its class (its
// --ingress-class, "nginx" by default) served on 80 and 443 (TLS with the
// certificate of the Secret spec.tls names for the request's SNI, else
// the controller's fake self-signed one), proxied to a Ready pod of the
// path's Service; /healthz on 10254.
func ingressNginx(v Version) Program {
	return func(ctx context.Context, c *Container) int {
		class := "nginx"

		for _, a := range c.Args {
			if k, val, ok := strings.Cut(a, "="); ok && k == "--ingress-class" {
				class = val
			}
		}

		fake, err := fakeCertificate()
		if err != nil {
			c.logf("error: the default certificate: %v", err)

			return 1
		}

		c.logf("NGINX Ingress controller Release: v%s (lab stand-in), watching Ingresses of class %q", v, class)

		in := &ingress{c: c, class: class, fake: fake}
		healthz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)

				return
			}

			text("ok")(w, r)
		})

		return serveAll(ctx, c, map[int]http.Handler{10254: healthz, 80: in, 443: tlsHandler{in}})
	}
}

type ingress struct {
	c     *Container
	class string
	fake  *tls.Certificate // ingress-nginx's "Kubernetes Ingress Controller Fake Certificate"
}

// tlsHandler marks the handler serveAll serves over TLS.
type tlsHandler struct{ *ingress }

func (in *ingress) routes(ctx context.Context) []Route {
	if in.c.Routes == nil {
		return nil
	}

	routes, err := in.c.Routes(ctx, in.class)
	if err != nil {
		in.c.logf("error: listing the Ingresses: %v", err)
	}

	return routes
}

// certificate is the one for the SNI's host, as ingress-nginx picks it.
func (in *ingress) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	for _, r := range in.routes(hello.Context()) {
		if r.Certificate != nil && hello.ServerName != "" && r.servesHost(strings.ToLower(hello.ServerName)) {
			return r.Certificate, nil
		}
	}

	return in.fake, nil
}

func (in *ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Server", "nginx")

	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}

	rt := route(in.routes(r.Context()), strings.ToLower(host), r.URL.Path)
	if rt == nil {
		nginxError(w, http.StatusNotFound)

		return
	}

	// ssl-redirect: on by default for a host with TLS.
	if r.TLS == nil && rt.Certificate != nil {
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)

		return
	}

	backend, err := rt.Backend(r.Context())
	if err != nil {
		in.c.logf("error: %s/%s %s%s: %v", rt.Namespace, rt.Ingress, host, r.URL.Path, err)
		nginxError(w, http.StatusServiceUnavailable)

		return
	}

	in.proxy(backend).ServeHTTP(w, r)
}

// proxy is nginx's proxy_pass to the pod, with the headers ingress-nginx
// sets (X-Forwarded-*, X-Real-IP) and the client's Host.
func (in *ingress) proxy(backend string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: backend})
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()

			if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
				pr.Out.Header.Set("X-Real-IP", ip)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("Server") // nginx's proxy_hide_header
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			in.c.logf("error: connect() to %s failed while connecting to upstream, request: \"%s %s\": %v", backend, r.Method, r.URL.Path, err)
			nginxError(w, http.StatusBadGateway)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
}

// nginxError is nginx's own error page.
func nginxError(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(code)

	title := strconv.Itoa(code) + " " + http.StatusText(code)
	if code == http.StatusServiceUnavailable {
		title = "503 Service Temporarily Unavailable"
	}

	fmt.Fprintf(w, "<html>\r\n<head><title>%s</title></head>\r\n<body>\r\n<center><h1>%s</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n", title, title)
}

// fakeCertificate is ingress-nginx's default: self-signed, for no name a
// client asks for, so a client verifying it refuses it.
func fakeCertificate() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}

	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "Kubernetes Ingress Controller Fake Certificate", Organization: []string{"Acme Co"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), DNSNames: []string{"ingress.local"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}

	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
