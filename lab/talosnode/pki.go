package talosnode

import (
	"bytes"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"text/template"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc/credentials"
)

func (n *Node) loadOrCreateSecrets() error {
	path := n.SecretsPath()

	bundle, err := secrets.LoadBundle(path)
	if err == nil {
		n.bundle = bundle

		return nil
	}

	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("talosnode: loading %s: %w", path, err)
	}

	contract, err := talosconfig.ParseContractFromVersion(n.opts.Version)
	if err != nil {
		return fmt.Errorf("talosnode: version %q: %w", n.opts.Version, err)
	}

	bundle, err = secrets.NewBundle(secrets.NewClock(), contract)
	if err != nil {
		return err
	}

	var buf bytes.Buffer

	enc := yaml.NewEncoder(&buf)
	if err = enc.Encode(bundle); err != nil {
		return err
	}

	if err = enc.Close(); err != nil {
		return err
	}

	if err = writeFileAtomic(path, buf.Bytes(), 0o600); err != nil {
		return err
	}

	n.bundle = bundle

	return nil
}

func (n *Node) persistedConfigPath() string { return filepath.Join(n.rootDir, ConfigPath) }

// InstallerImage is the installer image reference a node of the given
// version is generated with (what talosctl of that version writes).
func InstallerImage(version string) string {
	return "ghcr.io/siderolabs/installer:" + version
}

func (n *Node) loadOrCreateConfig() error {
	path := n.persistedConfigPath()

	b, err := os.ReadFile(path)
	if err == nil {
		if _, err = configloader.NewFromBytes(b); err != nil {
			return fmt.Errorf("talosnode: persisted config %s: %w", path, err)
		}

		n.active = b

		return nil
	}

	if !errors.Is(err, os.ErrNotExist) {
		return err
	}

	contract, err := talosconfig.ParseContractFromVersion(n.opts.Version)
	if err != nil {
		return err
	}

	input, err := generate.NewInput(n.opts.ClusterName, n.opts.Endpoint, n.opts.KubernetesVersion,
		generate.WithVersionContract(contract),
		generate.WithSecretsBundle(n.bundle),
		generate.WithInstallDisk(DefaultInstallDisk),
		generate.WithInstallImage(InstallerImage(n.opts.Version)),
	)
	if err != nil {
		return err
	}

	cfg, err := input.Config(machine.TypeControlPlane)
	if err != nil {
		return err
	}

	b, err = cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return err
	}

	if err = writeFileAtomic(path, b, 0o600); err != nil {
		return err
	}

	n.active = b

	return nil
}

// issueCertificates creates the apid server certificate (signed by the OS CA,
// SANs for loopback and the hostname) and the os:admin client certificate.
func (n *Node) issueCertificates() error {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(n.bundle.Certs.OS)
	if err != nil {
		return fmt.Errorf("talosnode: OS CA: %w", err)
	}

	now := time.Now()

	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(n.opts.Hostname),
		x509.IPAddresses(n.certIPs()),
		x509.DNSNames([]string{"localhost", n.opts.Hostname}),
		x509.NotBefore(now.Add(-time.Minute)),
		x509.NotAfter(now.Add(365*24*time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return fmt.Errorf("talosnode: server certificate: %w", err)
	}

	n.serverCert = *kp.Certificate

	client, err := n.bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		return fmt.Errorf("talosnode: client certificate: %w", err)
	}

	n.clientPEM, n.clientKey = client.Crt, client.Key

	return nil
}

// transportCredentials is apid's TLS: the node certificate, client
// certificates required and verified against the OS CA.
func (n *Node) transportCredentials() credentials.TransportCredentials {
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(n.bundle.Certs.OS.Crt)

	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{n.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	})
}

func (n *Node) writeTalosconfig() error {
	host, _, err := net.SplitHostPort(n.Addr())
	if err != nil {
		return err
	}

	cfg := config.NewConfig(n.contextName, []string{n.Addr()}, n.bundle.Certs.OS.Crt, &x509.PEMEncodedCertificateAndKey{Crt: n.clientPEM, Key: n.clientKey})
	cfg.Contexts[n.contextName].Nodes = []string{host}

	b, err := cfg.Bytes()
	if err != nil {
		return err
	}

	return writeFileAtomic(n.TalosconfigPath(), b, 0o600)
}

// ClientCertificate returns a client certificate/key pair (PEM) issued by the
// node's OS CA with the given roles, e.g. for testing os:reader.
func (n *Node) ClientCertificate(roles ...role.Role) (crt, key []byte, err error) {
	c, err := n.bundle.GenerateTalosAPIClientCertificate(role.MakeSet(roles...))
	if err != nil {
		return nil, nil, err
	}

	return c.Crt, c.Key, nil
}

var kubeconfigTemplate = template.Must(template.New("kubeconfig").Parse(`apiVersion: v1
kind: Config
clusters:
    - name: {{ .Cluster }}
      cluster:
        server: {{ .Server }}
        certificate-authority-data: {{ .CA }}
users:
    - name: {{ .User }}
      user:
        client-certificate-data: {{ .Crt }}
        client-key-data: {{ .Key }}
contexts:
    - context:
        cluster: {{ .Cluster }}
        namespace: default
        user: {{ .User }}
      name: {{ .User }}
current-context: {{ .User }}
`))

// adminKubeconfig renders the admin kubeconfig like Talos's
// kubeconfig.GenerateAdmin: client certificate CN=admin O=system:masters
// signed by the cluster (Kubernetes) CA of the running config.
func adminKubeconfig(cfg talosconfig.Config) ([]byte, error) {
	// The K8s* accessors read Talos 1.13's v1alpha1 cluster section and
	// 1.14's multi-document Kubernetes config alike.
	caCfg, cluster := cfg.K8sAPIServerCAConfig(), cfg.K8sClusterConfig()
	if caCfg == nil || caCfg.IssuingCA() == nil || cluster == nil || cluster.ClusterEndpoint() == nil {
		return nil, errors.New("cluster CA is not set in the machine config")
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(caCfg.IssuingCA())
	if err != nil {
		return nil, fmt.Errorf("error parsing cluster CA: %w", err)
	}

	now := time.Now()

	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(constants.KubernetesAdminCertCommonName),
		x509.Organization(constants.KubernetesAdminCertOrganization),
		x509.NotBefore(now.Add(-time.Minute)),
		x509.NotAfter(now.Add(constants.KubernetesAdminCertDefaultLifetime)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, err
	}

	// The accepted CAs may list the issuing one (the v1alpha1 bridge
	// does): each certificate once.
	caPEM := append([]byte(nil), caCfg.IssuingCA().Crt...)
	for _, accepted := range caCfg.AcceptedCAs() {
		if !bytes.Equal(accepted.Crt, caCfg.IssuingCA().Crt) {
			caPEM = append(caPEM, accepted.Crt...)
		}
	}

	var buf bytes.Buffer

	err = kubeconfigTemplate.Execute(&buf, map[string]string{
		"Cluster": cluster.ClusterName(),
		"Server":  cluster.ClusterEndpoint().String(),
		"CA":      base64.StdEncoding.EncodeToString(caPEM),
		"User":    "admin@" + cluster.ClusterName(),
		"Crt":     base64.StdEncoding.EncodeToString(kp.CrtPEM),
		"Key":     base64.StdEncoding.EncodeToString(kp.KeyPEM),
	})

	return buf.Bytes(), err
}

// certIPs are the IP addresses of the apid certificate: loopback and the
// node's own addresses (Options.Addresses), as apid's certificate names the
// node's IPs.
func (n *Node) certIPs() []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	for _, a := range n.opts.Addresses {
		if ip := net.ParseIP(a); ip != nil {
			ips = append(ips, ip)
		}
	}

	return ips
}
