package kubecp_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/lab/kubecp"
)

// The control plane's tests take addresses 127.25.1.N (block 25 is this
// package's, with providers/helm's lab-node test on 127.25.2.N).

// node is a control plane started for a test, as talosvm starts it from
// a machine config.
type node struct {
	cp     *kubecp.ControlPlane
	cfg    coreconfig.Provider
	k      kubernetes.Interface
	rc     *rest.Config
	dir    string // Config.Dir
	host   string // where the node's paths live
	addr   string
	logBuf *syncBuf
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, format+"\n", args...)
}

// startNode starts a control plane on 127.25.1.N with a fresh machine
// config's CA, service account key and secretbox key, running Job pods.
func startNode(t *testing.T, n int) *node {
	t.Helper()

	addr := fmt.Sprintf("127.25.1.%d", n)
	for _, port := range []int{kubecp.APIPort, kubecp.EtcdPort, kubecp.EtcdPeerPort} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
		if err != nil {
			t.Fatalf("%s:%d is taken (another run of this test?): %v", addr, port, err)
		}
		l.Close() //nolint:errcheck
	}

	in, err := generate.NewInput("lab", "https://"+addr+":6443", "")
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	bin, err := kubecp.Binaries(context.Background(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}

	dir, host := t.TempDir(), t.TempDir()
	logs := &syncBuf{}
	cluster := cfg.Cluster()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cp, err := kubecp.Start(ctx, kubecp.Config{
		Dir: dir, EtcdDir: filepath.Join(dir, "etcd"), Addr: addr, NodeName: "talos-lab", Bin: bin,
		CA: cluster.IssuingCA(), ServiceAccountKey: cluster.ServiceAccount().Key,
		SecretboxKey: cluster.SecretboxEncryptionSecret(), AESCBCKey: cluster.AESCBCEncryptionSecret(),
		HostPath: func(p string) (string, error) { return filepath.Join(host, p), nil },
		Log:      logs.logf,
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(cp.Stop)

	rc, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}

	rc.WarningHandler = rest.NoWarnings{}

	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	return &node{cp: cp, cfg: cfg, k: k, rc: rc, dir: dir, host: host, addr: addr, logBuf: logs}
}

// TestSecretsEncryptedAtRest: a Secret written through the API is in etcd
// as secretbox's ciphertext (Talos' key of the machine config), never its
// plaintext, and reads back through the API.
func TestSecretsEncryptedAtRest(t *testing.T) {
	t.Parallel()

	n := startNode(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const plaintext = "registration-shared-secret-0f9d"

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "synapse"}, StringData: map[string]string{"registration": plaintext}}
	if _, err := n.k.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("http://%s:%d", n.addr, kubecp.EtcdPort)}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close() //nolint:errcheck

	resp, err := etcd.Get(ctx, "/registry/secrets/default/synapse")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the Secret's key in etcd: %v %v", resp, err)
	}

	raw := resp.Kvs[0].Value
	if !bytes.HasPrefix(raw, []byte("k8s:enc:secretbox:v1:")) || bytes.Contains(raw, []byte(plaintext)) {
		t.Errorf("the Secret in etcd is not secretbox's ciphertext: %q", raw[:min(len(raw), 80)])
	}

	got, err := n.k.CoreV1().Secrets("default").Get(ctx, "synapse", metav1.GetOptions{})
	if err != nil || string(got.Data["registration"]) != plaintext {
		t.Errorf("the Secret read back: %v %v", got, err)
	}

	// a ConfigMap is not a secret: in clear, as on Talos
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Data: map[string]string{"k": "visible-value"}}
	if _, err := n.k.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if resp, err := etcd.Get(ctx, "/registry/configmaps/default/plain"); err != nil || len(resp.Kvs) != 1 || !bytes.Contains(resp.Kvs[0].Value, []byte("visible-value")) {
		t.Errorf("the ConfigMap in etcd: %v %v", resp, err)
	}

	fi, err := os.Stat(filepath.Join(n.dir, "encryption.yaml"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the encryption configuration's file: %v %v", fi, err)
	}
}

// TestStartBadKey: a machine config key that is not 32 bytes of base64
// is refused before anything starts, naming the field.
func TestStartBadKey(t *testing.T) {
	in, err := generate.NewInput("lab", "https://127.25.1.250:6443", "")
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	_, err = kubecp.Start(context.Background(), kubecp.Config{Dir: t.TempDir(), Addr: "127.25.1.250",
		CA: cfg.Cluster().IssuingCA(), ServiceAccountKey: cfg.Cluster().ServiceAccount().Key, SecretboxKey: "c2hvcnQ="})
	if err == nil || !strings.Contains(err.Error(), "cluster.secretboxEncryptionSecret is not 32 bytes in base64") {
		t.Fatalf("a short secretbox key: %v", err)
	}
}
