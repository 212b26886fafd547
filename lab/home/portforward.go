package home

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"
)

// IngressHTTPSPort is the node's port the router forwards the internet's
// 443 to: the ingress controller's HTTPS NodePort (examples/homelab's
// httpsNodePort), as approval.dns asks the user to set it.
const IngressHTTPSPort = 30443

// matrixEndpoint is the homeserver as the internet reaches it: the
// home's public address, whose router forwards 443 to the Talos node's
// ingress (NodeAddress:IngressHTTPSPort). The lab has no public DNS
// (matrix_url is an address), so the endpoint asks the ingress as a
// client naming the homeserver does: SNI and Host MatrixDomain, the
// ingress's certificate verified against MatrixCA. While the forward goes
// nowhere (no ingress yet, or rolled back) it answers 502; while
// FailFederation is set, the federation API answers 503.
func (h *Home) matrixEndpoint(ca *x509.CertPool) http.Handler {
	target := net.JoinHostPort(h.NodeAddress(), strconv.Itoa(IngressHTTPSPort))
	forward := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// A port forward adds no header: the ingress sees the request
			// as the client sent it, to the homeserver's name.
			pr.SetURL(&url.URL{Scheme: "https", Host: target})
			pr.Out.Host = MatrixDomain
		},
		Transport: &http.Transport{
			TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: ca, ServerName: MatrixDomain},
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: time.Minute,
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "the router forwards 443 to the Talos node's ingress at %s, which does not answer: %v\n", target, err)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == FederationPath && h.failFed.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"errcode":"M_UNKNOWN","error":"the lab's federation failure is switched on"}`) //nolint:errcheck

			return
		}

		forward.ServeHTTP(w, r)
	})
}
