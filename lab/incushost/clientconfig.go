package incushost

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// WriteClientConfig makes dir an incus CLI configuration (INCUS_CONF)
// whose default remote, remote, is this host at url: config.yml, the
// server's certificate pinned as servercerts/REMOTE.crt, and a client
// certificate of its own (client.crt, client.key), trusted by the host:
// what `incus remote add` leaves once the host trusts the client. A
// client certificate already in dir is kept (and trusted again).
func (s *Server) WriteClientConfig(dir, remote, url string) error {
	if err := os.MkdirAll(filepath.Join(dir, "servercerts"), 0o700); err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	crtPath, keyPath := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	certPEM, err := os.ReadFile(crtPath)
	if err != nil {
		var keyPEM []byte
		if certPEM, keyPEM, err = newClientCert(remote); err != nil {
			return err
		}
		if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
			return fmt.Errorf("incushost: %w", err)
		}
		if err := os.WriteFile(crtPath, certPEM, 0o644); err != nil {
			return fmt.Errorf("incushost: %w", err)
		}
	}
	if err := s.AddTrusted(certPEM); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "servercerts", remote+".crt"), s.certPEM, 0o644); err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	cfg := fmt.Sprintf("default-remote: %s\nremotes:\n  %s:\n    addr: %s\n    auth_type: tls\n    protocol: incus\n    public: false\naliases: {}\n", remote, remote, url)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("incushost: %w", err)
	}
	return nil
}

// newClientCert is a self-signed client certificate and its key, as the
// incus CLI makes on its first use.
func newClientCert(name string) (certPEM, keyPEM []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("incushost: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("incushost: %w", err)
	}
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "migrate-lab client for " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, fmt.Errorf("incushost: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("incushost: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}
