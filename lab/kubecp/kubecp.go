package kubecp

import (
	"cmp"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/crypto/x509"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Ports of a Talos control plane node.
const (
	APIPort      = 6443
	EtcdPort     = 2379
	EtcdPeerPort = 2380
)

// StartTimeout bounds each wait of Start (etcd healthy, API ready): the
// machine may be slow under load.
var StartTimeout = 3 * time.Minute

// Config is one node's control plane.
type Config struct {
	Dir      string // its files: pki/, logs/, kubeconfig, admission.yaml
	EtcdDir  string // etcd's data directory (the node's /var/lib/etcd)
	Addr     string // IPv4 the node listens on: etcd 2379/2380, the API 6443
	NodeName string // the Node kwok plays the kubelet of: the node's hostname
	Bin      string // directory of the binaries (Binaries)
	// CA is the cluster CA of the machine config: it signs the API
	// server's certificate and verifies client certificates.
	CA *x509.PEMEncodedCertificateAndKey
	// ServiceAccountKey is the machine config's service account key (PEM).
	ServiceAccountKey []byte
	// SecretboxKey and AESCBCKey are the machine config's
	// cluster.secretboxEncryptionSecret and (older configs)
	// cluster.aescbcEncryptionSecret, base64 of 32 bytes: the API server
	// encrypts Secrets in etcd with them, as Talos configures it
	// (encryption.go).
	SecretboxKey, AESCBCKey string
	Log                     func(format string, args ...any) // progress; nil for none
	// HostPath maps a node path to where it lives on the host (the
	// node's HostPath). With it, the control plane runs the commands of
	// the node's Job pods (jobs.go) instead of kwok's pod-complete stage
	// marking them Succeeded; nil runs no pod.
	HostPath func(nodePath string) (string, error)
	// OnPodRun, if set, is called when the pod runner starts running the
	// commands of a Job's pod (once per pod: not when it only writes the
	// status of a pod it ran before): a record for tests that count
	// Jobs run (lab/home's events log).
	OnPodRun func(namespace, pod, job string)
	// Taints and Labels are the Node's beyond the kubelet's own labels,
	// as Talos registers it from its machine config (talosvm): a control
	// plane that does not allow scheduling is tainted NoSchedule.
	Taints []Taint
	Labels map[string]string
	// CPU and Memory are the node's capacity, as Kubernetes quantities
	// (the VM's limits.cpu and limits.memory); "" for 6 and 24Gi. Its
	// allocatable is that minus what Talos' kubelet reserves for the
	// system on a control plane (50m, 512Mi) and kubelet's hard eviction
	// threshold (100Mi), so the real scheduler leaves a pod that asks for
	// more Pending, as on the VM.
	CPU, Memory string
}

// allocatable is what kubelet leaves to pods of a Talos control plane's
// capacity: minus Talos' systemReserved (constants
// KubeletSystemReservedCPU, KubeletSystemReservedMemoryControlPlane) and
// kubelet's default hard eviction of memory.available<100Mi.
func allocatable(cpu, memory string) (string, string, error) {
	c, err := resource.ParseQuantity(cpu)
	if err != nil {
		return "", "", fmt.Errorf("kubecp: node cpu %q: %w", cpu, err)
	}
	m, err := resource.ParseQuantity(memory)
	if err != nil {
		return "", "", fmt.Errorf("kubecp: node memory %q: %w", memory, err)
	}
	c.Sub(resource.MustParse("50m"))
	m.Sub(resource.MustParse("512Mi"))
	m.Sub(resource.MustParse("100Mi"))
	return c.String(), m.String(), nil
}

// Taint is a Node taint.
type Taint struct {
	Key, Value, Effect string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	cfg        Config
	procs      []*proc // in start order
	kubeconfig string
	api        *http.Client
	stopPods   context.CancelFunc // ends the pod runner (jobs.go)
	runners    sync.WaitGroup     // the pod runner, its pods, the kubelet's endpoint
	kubelet    *http.Server       // the kubelet's endpoint (logs.go)
	live       liveLogs           // the container logs being written
	podIPs     struct {           // the app pods' addresses (apppods.go), by pod UID
		sync.Mutex
		byUID map[string]string
	}
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

// Start starts etcd, the API server, the controller manager, the scheduler
// and kwok, and registers the Node. It returns once the API server is
// ready and kwok runs; on error (or when ctx ends) it stops what it started.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	if net.ParseIP(cfg.Addr).To4() == nil {
		return nil, fmt.Errorf("kubecp: Addr %q is not an IPv4 address", cfg.Addr)
	}

	if cfg.CA == nil || len(cfg.CA.Crt) == 0 || len(cfg.CA.Key) == 0 || len(cfg.ServiceAccountKey) == 0 {
		return nil, errors.New("kubecp: the machine config has no cluster CA or service account key")
	}

	encryption, err := encryptionConfig(cfg.SecretboxKey, cfg.AESCBCKey)
	if err != nil {
		return nil, err
	}

	c := &ControlPlane{cfg: cfg, kubeconfig: filepath.Join(cfg.Dir, "kubeconfig")}
	if err := c.writeFiles(encryption); err != nil {
		return nil, err
	}

	if err := c.start(ctx); err != nil {
		c.Stop()

		return nil, err
	}

	return c, nil
}

func (c *ControlPlane) start(ctx context.Context) error {
	cfg := c.cfg
	pki := filepath.Join(cfg.Dir, "pki")
	etcdURL := fmt.Sprintf("http://%s:%d", cfg.Addr, EtcdPort)
	peerURL := fmt.Sprintf("http://%s:%d", cfg.Addr, EtcdPeerPort)

	cfg.logf("kubecp: starting etcd on %s", etcdURL)

	if err := c.run("etcd", "--name", cfg.NodeName, "--data-dir", cfg.EtcdDir,
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", cfg.NodeName+"="+peerURL,
		"--listen-metrics-urls", "", "--log-level", "warn"); err != nil {
		return err
	}

	if err := c.wait(ctx, "etcd", func() bool { return c.EtcdHealthy(ctx) }); err != nil {
		return err
	}

	cfg.logf("kubecp: starting kube-apiserver on https://%s:%d", cfg.Addr, APIPort)

	if err := c.run("kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", cfg.Addr, "--advertise-address", cfg.Addr, "--secure-port", fmt.Sprint(APIPort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--client-ca-file", filepath.Join(pki, "ca.crt"),
		"--service-account-key-file", filepath.Join(pki, "sa.key"), "--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/12",
		"--authorization-mode", "RBAC",
		// pods/log and the like: the kubelet's endpoint (logs.go) is on the
		// node's address; its hostname resolves on a Talos node (its
		// /etc/hosts), not on the lab's host
		"--kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP",
		"--allow-privileged=true",
		"--admission-control-config-file", filepath.Join(cfg.Dir, "admission.yaml"),
		"--encryption-provider-config", filepath.Join(cfg.Dir, "encryption.yaml")); err != nil {
		return err
	}

	if err := c.wait(ctx, "kube-apiserver", func() bool { return c.get(ctx, "/readyz") == nil }); err != nil {
		return err
	}

	common := []string{"--kubeconfig", c.kubeconfig, "--authentication-kubeconfig", c.kubeconfig,
		"--authorization-kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", cfg.Addr, "--secure-port", "0"}

	cfg.logf("kubecp: starting kube-controller-manager and kube-scheduler")

	if err := c.run("kube-controller-manager", append(common,
		"--service-account-private-key-file", filepath.Join(pki, "sa.key"), "--root-ca-file", filepath.Join(pki, "ca.crt"),
		"--cluster-signing-cert-file", filepath.Join(pki, "ca.crt"), "--cluster-signing-key-file", filepath.Join(pki, "ca.key"),
		"--use-service-account-credentials")...); err != nil {
		return err
	}

	if err := c.run("kube-scheduler", common...); err != nil {
		return err
	}

	// Pods are refused until the controller manager made the default
	// service account: ready means a pod can be created.
	if err := c.wait(ctx, "kube-controller-manager", func() bool {
		return c.get(ctx, "/api/v1/namespaces/default/serviceaccounts/default") == nil
	}); err != nil {
		return err
	}

	if err := c.serveKubelet(); err != nil {
		return err
	}

	if err := c.registerNode(ctx); err != nil {
		return err
	}

	cfg.logf("kubecp: starting kwok, the kubelet of node %s", cfg.NodeName)

	// The node's Lease renewed as a kubelet renews it: otherwise the node
	// lifecycle controller marks the node and its pods not ready between
	// the stage's rare status heartbeats (see scripts/kube-up.sh).
	args := []string{"--kubeconfig", c.kubeconfig, "--manage-single-node", cfg.NodeName, "--node-lease-duration-seconds", "40"}
	stages, _ := filepath.Glob(filepath.Join(cfg.Bin, "kwok-stages", "*.yaml")) //nolint:errcheck
	ours, _ := filepath.Glob(filepath.Join(cfg.Dir, "kwok-stages", "*.yaml"))   //nolint:errcheck // writeFiles wrote them

	for _, f := range append(stages, ours...) {
		if cfg.HostPath != nil && filepath.Base(f) == "pod-complete.yaml" {
			continue // the pod runner ends Job pods, having run them
		}

		if cfg.HostPath != nil && filepath.Base(f) == "pod-ready.yaml" {
			derived, err := c.podReadyForOthers(f)
			if err != nil {
				return err
			}

			f = derived
		}

		args = append(args, "-c", f)
	}

	if err := c.run("kwok", args...); err != nil {
		return err
	}

	if cfg.HostPath != nil {
		podCtx, stop := context.WithCancel(context.Background())
		c.stopPods = stop

		c.runners.Add(3)

		go c.runPods(podCtx)
		go c.runAppPods(podCtx)
		go c.serveNodePorts(podCtx)
	}

	return nil
}

// run starts one binary with its output in Dir/logs/NAME.log.
func (c *ControlPlane) run(name string, args ...string) error {
	logPath := filepath.Join(c.cfg.Dir, "logs", name+".log")

	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close() //nolint:errcheck

	cmd := exec.Command(filepath.Join(c.cfg.Bin, name), args...) //nolint:gosec
	cmd.Stdout, cmd.Stderr = out, out
	// its own process group (a Ctrl-C to the lab is the lab's to handle),
	// and killed with the process that started it
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err = cmd.Start(); err != nil {
		return fmt.Errorf("kubecp: %s: %w", name, err)
	}

	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }() //nolint:errcheck // the exit is seen through done

	c.procs = append(c.procs, p)

	return nil
}

// wait polls ready until it is true, the process NAME exits, ctx ends or
// StartTimeout passes.
func (c *ControlPlane) wait(ctx context.Context, name string, ready func() bool) error {
	var p *proc

	for _, q := range c.procs {
		if q.name == name {
			p = q
		}
	}
	deadline := time.Now().Add(StartTimeout)

	for !ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("kubecp: %s exited (%s): %s", name, p.cmd.ProcessState, c.logTail(name))
		case <-time.After(250 * time.Millisecond):
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("kubecp: %s not ready after %s: %s", name, StartTimeout, c.logTail(name))
		}
	}

	return nil
}

func (c *ControlPlane) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.cfg.Dir, "logs", name+".log")) //nolint:errcheck
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}

	return strings.TrimSpace(string(b))
}

// EtcdHealthy asks etcd's /health endpoint.
func (c *ControlPlane) EtcdHealthy(ctx context.Context) bool { return EtcdHealthy(ctx, c.cfg.Addr) }

// EtcdHealthy asks the /health endpoint of the etcd on addr.
func EtcdHealthy(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d/health", addr, EtcdPort), nil)
	if err != nil {
		return false
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close() //nolint:errcheck

	var h struct {
		Health string `json:"health"`
	}

	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// Kubeconfig is the path of the admin kubeconfig the control plane's own
// components use.
func (c *ControlPlane) Kubeconfig() string { return c.kubeconfig }

func (c *ControlPlane) get(ctx context.Context, path string) error {
	return c.call(ctx, http.MethodGet, path, nil)
}

func (c *ControlPlane) call(ctx context.Context, method, path string, body io.Reader) error {
	return c.do(ctx, method, path, "application/json", body, nil)
}

// do sends a request to the API server as the control plane's admin and
// decodes the answer into out (unless nil).
func (c *ControlPlane) do(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("https://%s:%d%s", c.cfg.Addr, APIPort, path), body)
	if err != nil {
		return err
	}

	req.Header.Set("Content-Type", contentType)

	resp, err := c.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck

	b, _ := io.ReadAll(resp.Body) //nolint:errcheck
	if resp.StatusCode >= 300 {
		return &httpError{code: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}

	if out != nil {
		return json.Unmarshal(b, out)
	}

	return nil
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

// registerNode creates the Node as a kubelet registers itself (kwok then
// keeps its status), with the taints and labels Talos gives it
// (Config.Taints, Config.Labels); registered at an earlier boot, they are
// set again, as Talos keeps them in line with its config.
func (c *ControlPlane) registerNode(ctx context.Context) error {
	name := c.cfg.NodeName
	labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"node-role.kubernetes.io/control-plane": "", "type": "kwok"}
	for k, v := range c.cfg.Labels {
		labels[k] = v
	}
	capCPU, capMem := cmp.Or(c.cfg.CPU, "6"), cmp.Or(c.cfg.Memory, "24Gi")
	allocCPU, allocMem, err := allocatable(capCPU, capMem)
	if err != nil {
		return err
	}
	taints := []map[string]string{}
	for _, t := range c.cfg.Taints {
		taints = append(taints, map[string]string{"key": t.Key, "value": t.Value, "effect": t.Effect})
	}
	node := map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{
			"name":        name,
			"annotations": map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			"labels":      labels,
		},
		"spec": map[string]any{"taints": taints},
		"status": map[string]any{
			"allocatable": map[string]string{"cpu": allocCPU, "memory": allocMem, "pods": "110"},
			"capacity":    map[string]string{"cpu": capCPU, "memory": capMem, "pods": "110"},
			"addresses":   []map[string]string{{"type": "InternalIP", "address": c.cfg.Addr}, {"type": "Hostname", "address": name}},
			// kwok leaves them (no --node-port: it would serve that port itself)
			"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]int{"Port": KubeletPort}},
			"nodeInfo":        map[string]string{"architecture": "amd64", "operatingSystem": "linux", "osImage": "Talos (lab, kubelet simulated by kwok)"},
		},
	}

	b, err := json.Marshal(node)
	if err != nil {
		return err
	}

	err = c.call(ctx, http.MethodPost, "/api/v1/nodes", strings.NewReader(string(b)))

	var he *httpError
	if errors.As(err, &he) && he.code == http.StatusConflict { // registered at an earlier boot
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{"taints": taints}})
		if err := c.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", strings.NewReader(string(patch)), nil); err != nil {
			return fmt.Errorf("kubecp: updating node %s: %w", name, err)
		}
		// registered before the node served logs: its kubelet port
		status, _ := json.Marshal(map[string]any{"status": map[string]any{"daemonEndpoints": node["status"].(map[string]any)["daemonEndpoints"]}}) //nolint:forcetypeassert
		if err := c.do(ctx, http.MethodPatch, "/api/v1/nodes/"+name+"/status", "application/merge-patch+json", strings.NewReader(string(status)), nil); err != nil {
			return fmt.Errorf("kubecp: updating node %s: %w", name, err)
		}
		return nil
	}

	if err != nil {
		return fmt.Errorf("kubecp: registering node %s: %w", name, err)
	}

	return nil
}

// Stop stops the processes in reverse start order (kwok, scheduler,
// controller manager, API server, etcd): TERM, KILL after 15s, each
// reaped. Safe to call twice.
func (c *ControlPlane) Stop() {
	if c.kubelet != nil {
		c.kubelet.Close() //nolint:errcheck // its streams end
	}

	if c.stopPods != nil {
		c.stopPods() // its pods killed, their status left for the next start
	}

	c.runners.Wait()

	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]

		select {
		case <-p.done:
			continue
		default:
		}

		p.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck

		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill() //nolint:errcheck
			<-p.done
		}
	}
}

// PIDs are the process ids of the running components, by name.
func (c *ControlPlane) PIDs() map[string]int {
	m := map[string]int{}

	for _, p := range c.procs {
		select {
		case <-p.done:
		default:
			m[p.name] = p.cmd.Process.Pid
		}
	}

	return m
}

// writeFiles writes Dir/pki (the CA, the API server's serving certificate
// for Addr, an admin client certificate, the service account key), the
// components' kubeconfig, the admission configuration and the
// encryption configuration (0600: it holds the keys).
func (c *ControlPlane) writeFiles(encryption []byte) error {
	cfg := c.cfg
	pki := filepath.Join(cfg.Dir, "pki")

	for _, d := range []string{pki, filepath.Join(cfg.Dir, "logs"), filepath.Join(cfg.Dir, "kwok-stages"), cfg.EtcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(cfg.CA)
	if err != nil {
		return fmt.Errorf("kubecp: cluster CA: %w", err)
	}

	now := time.Now()
	serving, err := x509.NewKeyPair(ca,
		x509.CommonName("kube-apiserver"),
		x509.IPAddresses([]net.IP{net.ParseIP(cfg.Addr), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}),
		x509.DNSNames([]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", cfg.NodeName}),
		x509.NotBefore(now.Add(-time.Minute)), x509.NotAfter(now.Add(365*24*time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		return err
	}

	admin, err := x509.NewKeyPair(ca,
		x509.CommonName("lab-control-plane"), x509.Organization("system:masters"),
		x509.NotBefore(now.Add(-time.Minute)), x509.NotAfter(now.Add(365*24*time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		return err
	}

	// the kubelet's serving certificate, and the API server's client
	// certificate to the kubelet (Talos': system:masters)
	kubelet, err := x509.NewKeyPair(ca,
		x509.CommonName(cfg.NodeName),
		x509.IPAddresses([]net.IP{net.ParseIP(cfg.Addr)}), x509.DNSNames([]string{cfg.NodeName}),
		x509.NotBefore(now.Add(-time.Minute)), x509.NotAfter(now.Add(365*24*time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		return err
	}

	kubeletClient, err := x509.NewKeyPair(ca,
		x509.CommonName("apiserver-kubelet-client"), x509.Organization("system:masters"),
		x509.NotBefore(now.Add(-time.Minute)), x509.NotAfter(now.Add(365*24*time.Hour)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		return err
	}

	files := map[string][]byte{
		"pki/kubelet.crt": kubelet.CrtPEM, "pki/kubelet.key": kubelet.KeyPEM,
		"pki/apiserver-kubelet-client.crt": kubeletClient.CrtPEM, "pki/apiserver-kubelet-client.key": kubeletClient.KeyPEM,
		"pki/ca.crt": cfg.CA.Crt, "pki/ca.key": cfg.CA.Key,
		"pki/apiserver.crt": serving.CrtPEM, "pki/apiserver.key": serving.KeyPEM,
		"pki/sa.key":      cfg.ServiceAccountKey,
		"admission.yaml":  []byte(admission),
		"encryption.yaml": encryption,
		"kubeconfig": fmt.Appendf(nil, kubeconfigFormat, cfg.Addr, APIPort,
			base64.StdEncoding.EncodeToString(cfg.CA.Crt),
			base64.StdEncoding.EncodeToString(admin.CrtPEM), base64.StdEncoding.EncodeToString(admin.KeyPEM)),
	}

	stages, err := stageFiles()
	if err != nil {
		return err
	}

	maps.Copy(files, stages)

	for name, b := range files {
		if err = os.WriteFile(filepath.Join(cfg.Dir, name), b, 0o600); err != nil {
			return err
		}
	}

	cert, err := tls.X509KeyPair(admin.CrtPEM, admin.KeyPEM)
	if err != nil {
		return err
	}

	roots := stdx509.NewCertPool()
	roots.AppendCertsFromPEM(cfg.CA.Crt)

	c.api = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}

	return nil
}

const kubeconfigFormat = `apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://%s:%d
    certificate-authority-data: %s
users:
- name: control-plane
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: lab
  context: {cluster: lab, user: control-plane}
current-context: lab
`

// admission is PodSecurity as Talos configures it (and scripts/kube-up.sh).
const admission = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces: [kube-system]
`
