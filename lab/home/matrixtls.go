package home

import (
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
	"path/filepath"
	"time"
)

// MatrixDomain is the homeserver's public name, the server_name and
// public_baseurl host of the old matrix VM's homeserver.yaml (and the
// example's matrix_domain): the federation endpoint's certificate is for
// it.
const MatrixDomain = "matrix.example.org"

// WellKnownPath is where a homeserver delegates its federation
// (Synapse's serve_server_wellknown); MatrixDelegation is what the lab's
// endpoint answers there: federation on port 443, the ingress's, rather
// than Matrix's default 8448, which the router does not forward.
const (
	WellKnownPath    = "/.well-known/matrix/server"
	MatrixDelegation = MatrixDomain + ":443"
)

// matrixCAFile is the federation endpoint's CA certificate under Dir.
const matrixCAFile = "matrix-ca.pem"

// matrixTLS makes the federation endpoint's own CA (written to
// Dir/matrix-ca.pem, the example's matrix_ca) and a certificate it signs
// for MatrixDomain and the endpoint's address, as an ingress's would be
// from a CA only the runbook names. A new CA each start: nothing trusts
// an older one.
func (h *Home) matrixTLS(ip net.IP) (*tls.Config, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "migrate lab Matrix CA", Organization: []string{"migrate lab"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: MatrixDomain},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(90 * 24 * time.Hour),
		DNSNames: []string{MatrixDomain, "localhost"}, IPAddresses: []net.IP{ip},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(h.MatrixCA(), caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("lab: the Matrix CA: %w", err)
	}
	// The same certificate for the ingress (the example's synapse-tls
	// Secret): the endpoint stands in for the ingress that serves it.
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), caPEM...)
	if err := os.WriteFile(h.MatrixTLSCert(), chain, 0o644); err != nil {
		return nil, fmt.Errorf("lab: the Matrix certificate: %w", err)
	}
	if err := os.WriteFile(h.MatrixTLSKey(), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("lab: the Matrix certificate's key: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der, caDER}, PrivateKey: key}}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// MatrixCA is the PEM file of the CA of the federation endpoint's
// certificate (the example's matrix_ca).
func (h *Home) MatrixCA() string { return filepath.Join(h.dir, matrixCAFile) }

// MatrixTLSCert and MatrixTLSKey are the endpoint's certificate (with its
// CA) and key under Dir, the example's matrix_tls_cert and matrix_tls_key:
// what the runbook's ingress serves for matrix_domain (a certificate of
// the user's on a real server, from their ACME client, age-encrypted).
func (h *Home) MatrixTLSCert() string { return filepath.Join(h.dir, "matrix-tls.crt") }

// MatrixTLSKey: see MatrixTLSCert.
func (h *Home) MatrixTLSKey() string { return filepath.Join(h.dir, "matrix-tls.key") }
