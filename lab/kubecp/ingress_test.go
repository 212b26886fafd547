package kubecp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestIngressAndServiceNames: the ingress-nginx stand-in serves the
// cluster's Ingress through its NodePorts as the controller does — TLS
// with the certificate of the Secret spec.tls names, the request proxied
// to the Synapse pod behind the rule's Service, HTTP redirected to
// HTTPS, an unknown host 404 — and a Job's busybox reaches that Service
// by its names, as through the cluster's DNS.
func TestIngressAndServiceNames(t *testing.T) {
	t.Parallel()

	n := startNode(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	privilegedNS(t, ctx, n, "matrix")

	// Synapse, on SQLite, behind the Service synapse (port 8008).
	writeFile(t, filepath.Join(n.host, "synapse", "config", "homeserver.yaml"), "server_name: matrix.example.org\nreport_stats: false\nserve_server_wellknown: true\n"+
		"database:\n  name: sqlite3\n  args:\n    database: /data/homeserver.db\n")
	n.deploy(t, ctx, "matrix", "synapse", corev1.PodSpec{Containers: []corev1.Container{{
		Name: "synapse", Image: "matrixdotorg/synapse:v1.120.2",
		Env:            []corev1.EnvVar{{Name: "SYNAPSE_CONFIG_PATH", Value: "/config/homeserver.yaml"}},
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8008}},
		VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "data", MountPath: "/data"}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}, PeriodSeconds: 1},
	}}, Volumes: []corev1.Volume{{Name: "config", VolumeSource: hostDir("/synapse/config")}, {Name: "data", VolumeSource: hostDir("/synapse/data")}}})
	n.service(t, ctx, "matrix", "synapse", corev1.ServicePort{Name: "http", Port: 8008, TargetPort: intstr.FromString("http")})

	// The controller, as charts/ingress installs it: NodePorts 30080 and 30443.
	n.deploy(t, ctx, "matrix", "ingress", corev1.PodSpec{Containers: []corev1.Container{{
		Name: "controller", Image: "registry.k8s.io/ingress-nginx/controller:v1.11.3",
		Args:           []string{"/nginx-ingress-controller", "--ingress-class=nginx"},
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 80}, {Name: "https", ContainerPort: 443}, {Name: "metrics", ContainerPort: 10254}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(10254)}}, PeriodSeconds: 1},
	}}})
	n.service(t, ctx, "matrix", "ingress", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080},
		corev1.ServicePort{Name: "https", Port: 443, TargetPort: intstr.FromString("https"), NodePort: 30443})

	caPool, certPEM, keyPEM := matrixCertificate(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "synapse-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	if _, err := n.k.CoreV1().Secrets("matrix").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	class, prefix := "nginx", networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "synapse"}, Spec: networkingv1.IngressSpec{
		IngressClassName: &class,
		TLS:              []networkingv1.IngressTLS{{Hosts: []string{"matrix.example.org"}, SecretName: "synapse-tls"}},
		Rules: []networkingv1.IngressRule{{Host: "matrix.example.org", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "synapse", Port: networkingv1.ServiceBackendPort{Number: 8008}}}}},
		}}}},
	}}
	if _, err := n.k.NetworkingV1().Ingresses("matrix").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n.appPod(t, ctx, "matrix", "synapse", "Ready", ready)
	n.appPod(t, ctx, "matrix", "ingress", "Ready", ready)

	t.Run("HTTPSToTheSynapsePod", func(t *testing.T) {
		// as a client naming the homeserver: SNI and Host matrix.example.org
		client := clientFor(n.addr+":30443", &tls.Config{RootCAs: caPool, ServerName: "matrix.example.org"})
		want := map[string]string{
			"/_matrix/client/versions":       `"versions":["r0.6.1",`,                             // the Synapse stand-in's list
			"/_matrix/federation/v1/version": `{"server":{"name":"Synapse","version":"1.120.2"}}`, // the pod's image's version
			"/.well-known/matrix/server":     `{"m.server":"matrix.example.org:443"}`,             // serve_server_wellknown
		}
		for p, body := range want {
			code, got := eventually(t, ctx, client, "https://matrix.example.org"+p, 200)
			if code != 200 || !strings.Contains(got, body) {
				t.Errorf("%s through the ingress: %d %q, want %q", p, code, got, body)
			}
		}
	})

	t.Run("FakeCertificateForOtherNames", func(t *testing.T) {
		client := clientFor(n.addr+":30443", &tls.Config{RootCAs: caPool, ServerName: "other.example.org"})
		if _, err := client.Get("https://other.example.org/"); err == nil || !strings.Contains(err.Error(), "failed to verify certificate") { //nolint:noctx
			t.Errorf("a name the Ingress has no TLS for: %v, want a certificate the client refuses", err)
		}

		conn, err := tls.Dial("tcp", n.addr+":30443", &tls.Config{ServerName: "other.example.org", InsecureSkipVerify: true}) //nolint:gosec // to read it
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close() //nolint:errcheck

		if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "Kubernetes Ingress Controller Fake Certificate" {
			t.Errorf("the certificate for a name without TLS: %q, want ingress-nginx's fake one", cn)
		}
	})

	t.Run("HTTPRedirectsAndUnknownHost", func(t *testing.T) {
		client := clientFor(n.addr+":30080", nil)
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := client.Get("http://matrix.example.org/_matrix/client/versions") //nolint:noctx
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://matrix.example.org/_matrix/client/versions" {
			t.Errorf("HTTP for a TLS host: %d %q, want 308 to https", resp.StatusCode, resp.Header.Get("Location"))
		}
		if code, _ := get(t, client, "http://elsewhere.example.org/"); code != 404 {
			t.Errorf("a host no Ingress names: %d, want 404", code)
		}
	})

	t.Run("JobReachesServiceByName", func(t *testing.T) {
		request := `printf 'GET /_matrix/client/versions HTTP/1.0\r\nHost: matrix.example.org\r\n\r\n' | busybox nc "$1" 8008 | grep -q '"versions"' || { echo "no answer from $1"; exit 1; }`
		for _, name := range []string{"synapse", "synapse.matrix.svc.cluster.local"} {
			job := "nc-" + strings.ReplaceAll(name, ".", "-")
			n.job(t, ctx, "matrix", job, corev1.Container{Name: "nc", Image: "busybox:1.36", Command: []string{"sh", "-c", request, "sh", name}})
			if p := n.pod(t, ctx, "matrix", job, corev1.PodSucceeded, corev1.PodFailed); p.Status.Phase != corev1.PodSucceeded {
				logs, _ := n.k.CoreV1().Pods("matrix").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
				t.Errorf("busybox nc %s 8008 from a Job: %s\n%s", name, p.Status.Phase, logs)
			}
		}
	})
}

// service creates a Service of the pods labelled app=name (NodePort when
// a port has one).
func (n *node) service(t *testing.T, ctx context.Context, ns, name string, ports ...corev1.ServicePort) {
	t.Helper()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: ports}}
	if ports[0].NodePort != 0 {
		svc.Spec.Type = corev1.ServiceTypeNodePort
	}

	if _, err := n.k.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clientFor is a client whose connections all go to addr (the name in
// the URL is the Host and the SNI, as DNS would send it there).
func clientFor(addr string, cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
}

func get(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()

	resp, err := client.Get(url) //nolint:noctx
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close() //nolint:errcheck

	b, _ := io.ReadAll(resp.Body)

	return resp.StatusCode, string(b)
}

// eventually asks url until it answers code (the NodePorts are opened
// within a poll of the Services) or ctx ends; the last answer.
func eventually(t *testing.T, ctx context.Context, client *http.Client, url string, code int) (int, string) {
	t.Helper()

	for deadline := time.Now().Add(time.Minute); ; {
		got, body := get(t, client, url)
		if got == code || time.Now().After(deadline) || ctx.Err() != nil {
			return got, body
		}

		time.Sleep(200 * time.Millisecond)
	}
}

// matrixCertificate is a CA and a certificate it signs for
// matrix.example.org (PEM, and its key).
func matrixCertificate(t *testing.T) (*x509.CertPool, []byte, []byte) {
	t.Helper()

	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "matrix.example.org"}, DNSNames: []string{"matrix.example.org"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	return pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
