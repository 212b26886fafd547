package kubecp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	clientv3 "go.etcd.io/etcd/client/v3"
	batchv1 "k8s.io/api/batch/v1"
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
	for _, port := range []int{kubecp.APIPort, kubecp.EtcdPort, kubecp.EtcdPeerPort, kubecp.KubeletPort} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
		if err != nil {
			t.Fatalf("%s:%d is taken (another run of this test?): %v", addr, port, err)
		}
		l.Close() //nolint:errcheck
	}

	in, err := generate.NewInput("lab", "https://"+addr+":6443", constants.DefaultKubernetesVersion)
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
	secretbox, aescbc := kubecp.EncryptionKeys(cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cp, err := kubecp.Start(ctx, kubecp.Config{
		Dir: dir, EtcdDir: filepath.Join(dir, "etcd"), Addr: addr, NodeName: "talos-lab", Bin: bin,
		CA: cfg.K8sAPIServerCAConfig().IssuingCA(), ServiceAccountKey: cfg.K8sServiceAccountConfig().IssuingKey().Key,
		SecretboxKey: secretbox, AESCBCKey: aescbc,
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
	in, err := generate.NewInput("lab", "https://127.25.1.250:6443", constants.DefaultKubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machinetype.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	_, err = kubecp.Start(context.Background(), kubecp.Config{Dir: t.TempDir(), Addr: "127.25.1.250",
		CA: cfg.K8sAPIServerCAConfig().IssuingCA(), ServiceAccountKey: cfg.K8sServiceAccountConfig().IssuingKey().Key, SecretboxKey: "c2hvcnQ="})
	if err == nil || !strings.Contains(err.Error(), "cluster.secretboxEncryptionSecret is not 32 bytes in base64") {
		t.Fatalf("a short secretbox key: %v", err)
	}
}

// job creates a Job of one pod (no retry) in ns running the container.
func (n *node) job(t *testing.T, ctx context.Context, ns, name string, ctr corev1.Container) {
	t.Helper()
	n.jobSpec(t, ctx, ns, name, corev1.PodSpec{Containers: []corev1.Container{ctr}})
}

func (n *node) jobSpec(t *testing.T, ctx context.Context, ns, name string, spec corev1.PodSpec) {
	t.Helper()

	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: spec}},
	}
	if _, err := n.k.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitSA waits for the default ServiceAccount of a new namespace: pods
// are refused until the controller manager made it.
func waitSA(t *testing.T, ctx context.Context, k kubernetes.Interface, ns string) {
	t.Helper()

	for {
		if _, err := k.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}

		select {
		case <-ctx.Done():
			t.Fatalf("no default ServiceAccount in %s", ns)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pod waits for the pod of Job name to be in one of the phases.
func (n *node) pod(t *testing.T, ctx context.Context, ns, name string, phases ...corev1.PodPhase) *corev1.Pod {
	t.Helper()

	for {
		pods, err := n.k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
		if err == nil && len(pods.Items) == 1 && slices.Contains(phases, pods.Items[0].Status.Phase) {
			return &pods.Items[0]
		}

		select {
		case <-ctx.Done():
			t.Fatalf("the pod of job %s never %v: %v %v", name, phases, pods, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestLogs: the node serves its Job pods' output as a kubelet does, to
// the API server's pods/log (client-go and kubectl): followed while the
// container runs, ending when it ends; tailLines, limitBytes, timestamps;
// a client without the API server's certificate is refused.
func TestLogs(t *testing.T) {
	t.Parallel()

	n := startNode(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// the pod prints, then waits for the test to open the gate (a file
	// on its hostPath volume)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "logs", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := n.k.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitSA(t, ctx, n.k, "logs")

	create := corev1.HostPathDirectoryOrCreate
	n.jobSpec(t, ctx, "logs", "talk", corev1.PodSpec{
		Containers: []corev1.Container{{Name: "talk", Image: "busybox", Command: []string{"sh", "-c",
			"echo first; echo to stderr >&2; printf 'no newline '; while [ ! -e /gate/open ]; do sleep 0.1; done; echo last"},
			VolumeMounts: []corev1.VolumeMount{{Name: "gate", MountPath: "/gate"}}}},
		Volumes: []corev1.Volume{{Name: "gate", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/gate", Type: &create}}}},
	})
	gate := filepath.Join(n.host, "gate", "open")
	pod := n.pod(t, ctx, "logs", "talk", corev1.PodRunning)

	rc, err := n.k.CoreV1().Pods("logs").GetLogs(pod.Name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("following the pod's log: %v", err)
	}
	defer rc.Close() //nolint:errcheck

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	for _, want := range []string{"first", "to stderr"} {
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("followed line %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no line %q while the pod runs", want)
		}
	}

	// the real kubectl follows it too, as a user runs it
	var kubectlOut *bytes.Buffer

	var kubectlDone chan error

	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		kubectlOut, kubectlDone = &bytes.Buffer{}, make(chan error, 1)
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", n.cp.Kubeconfig(), "logs", "-f", "-n", "logs", pod.Name)
		out, _ := cmd.StdoutPipe() //nolint:errcheck
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}

		rd := bufio.NewReader(out)

		first, err := rd.ReadString('\n')
		if err != nil || first != "first\n" {
			t.Fatalf("kubectl logs -f while the pod runs: %q %v", first, err)
		}

		go func() {
			b, _ := io.ReadAll(rd) //nolint:errcheck
			kubectlOut.Write(b)
			kubectlDone <- cmd.Wait()
		}()
	} else {
		t.Log("no kubectl on PATH: client-go only")
	}

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	var rest []string
	for l := range lines { // ends when the container ends
		rest = append(rest, l)
	}

	if fmt.Sprint(rest) != "[no newline last]" {
		t.Errorf("the followed log's end: %q", rest)
	}

	n.pod(t, ctx, "logs", "talk", corev1.PodSucceeded)

	logs := func(o *corev1.PodLogOptions) (string, error) {
		b, err := n.k.CoreV1().Pods("logs").GetLogs(pod.Name, o).DoRaw(ctx)
		return string(b), err
	}

	two, three := int64(2), int64(3)
	for _, tc := range []struct {
		opts *corev1.PodLogOptions
		want string
	}{
		{&corev1.PodLogOptions{}, "first\nto stderr\nno newline last\n"},
		{&corev1.PodLogOptions{TailLines: &two}, "to stderr\nno newline last\n"},
		{&corev1.PodLogOptions{LimitBytes: &three}, "fir"},
		{&corev1.PodLogOptions{Container: "talk", Follow: true}, "first\nto stderr\nno newline last\n"}, // ended: no wait
	} {
		if got, err := logs(tc.opts); err != nil || got != tc.want {
			t.Errorf("logs %+v: %q %v, want %q", tc.opts, got, err, tc.want)
		}
	}

	stamped, err := logs(&corev1.PodLogOptions{Timestamps: true, TailLines: &two})
	if ls := strings.Split(strings.TrimSpace(stamped), "\n"); err != nil || len(ls) != 2 || !strings.HasSuffix(ls[0], " to stderr") {
		t.Errorf("logs with timestamps: %q %v", stamped, err)
	} else if at, err := time.Parse(time.RFC3339Nano, strings.Fields(ls[0])[0]); err != nil || time.Since(at) > 5*time.Minute {
		t.Errorf("the timestamp of %q: %v %v", ls[0], at, err)
	}

	if got, err := logs(&corev1.PodLogOptions{Container: "nope"}); err == nil || !strings.Contains(got, "container nope is not valid") { // the API server's Status
		t.Errorf("logs of a container the pod has not: %q %#v", got, err)
	}

	if kubectlDone != nil {
		if err := <-kubectlDone; err != nil || kubectlOut.String() != "to stderr\nno newline last\n" {
			t.Errorf("kubectl logs -f: the rest %q, ended %v", kubectlOut.String(), err)
		}

		out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", n.cp.Kubeconfig(), "logs", "-n", "logs", "job/talk", "--tail", "1").CombinedOutput()
		if err != nil || string(out) != "no newline last\n" {
			t.Errorf("kubectl logs job/talk: %q %v", out, err)
		}
	}

	// the Node points the API server at the endpoint, kwok's heartbeats
	// leave it so
	node, err := n.k.CoreV1().Nodes().Get(ctx, "talos-lab", metav1.GetOptions{})
	if err != nil || node.Status.DaemonEndpoints.KubeletEndpoint.Port != kubecp.KubeletPort || node.Status.Addresses[0].Address != n.addr {
		t.Errorf("the node's kubelet endpoint: %+v %v", node.Status, err)
	}

	// a kubelet authenticates its client: the cluster CA's certificate of
	// someone allowed nodes/proxy
	url := fmt.Sprintf("https://%s:%d/containerLogs/logs/%s/talk", n.addr, kubecp.KubeletPort, pod.Name)
	for _, tc := range []struct {
		name string
		cert []tls.Certificate
		want string
	}{
		{"no certificate", nil, "401 Unauthorized"},
		{"another CA's", []tls.Certificate{clientCert(t, nil, "system:masters")}, "401 Unauthorized"}, // not the CA asked for: not sent
		{"the cluster CA's, no rights", []tls.Certificate{clientCert(t, n.cfg.K8sAPIServerCAConfig().IssuingCA(), "nobody")}, "403 Forbidden"},
	} {
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, Certificates: tc.cert, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the kubelet's certificate is not what is tested
		resp, err := c.Get(url)
		got := fmt.Sprint(err)
		if err == nil {
			got = resp.Status
			resp.Body.Close() //nolint:errcheck
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("the kubelet's endpoint to a client with %s: %s, want %q", tc.name, got, tc.want)
		}
	}
}

// clientCert is a client certificate signed by ca (a new CA when nil),
// its organization org.
func clientCert(t *testing.T, ca *x509.PEMEncodedCertificateAndKey, org string) tls.Certificate {
	t.Helper()

	if ca == nil {
		other, err := x509.NewSelfSignedCertificateAuthority(x509.ECDSA(true))
		if err != nil {
			t.Fatal(err)
		}

		ca = &x509.PEMEncodedCertificateAndKey{Crt: other.CrtPEM, Key: other.KeyPEM}
	}

	authority, err := x509.NewCertificateAuthorityFromCertificateAndKey(ca)
	if err != nil {
		t.Fatal(err)
	}

	kp, err := x509.NewKeyPair(authority, x509.CommonName(org), x509.Organization(org),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		t.Fatal(err)
	}

	cert, err := tls.X509KeyPair(kp.CrtPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	return cert
}

// TestEnvValueFrom: a Job pod's env takes Secret and ConfigMap keys and
// the pod's fields, and envFrom whole sources with their prefix, as
// kubelet makes them; a missing source or key that is not optional fails
// the container with kubelet's message.
func TestEnvValueFrom(t *testing.T) {
	t.Parallel()

	n := startNode(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	yes := true
	secret := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
	}
	configMap := func(name, key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &optional}}
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}

	if _, err := n.k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("synapse")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if _, err := n.k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Data: map[string]string{"mode": "prod", "level": "debug"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n.job(t, ctx, "default", "env", corev1.Container{Name: "c", Image: "busybox",
		Command: []string{"sh", "-c", `echo "PASS=$PASS MODE=$MODE OPT=${OPT-unset} OPTKEY=${OPTKEY-unset} POD=$POD NS=$NS NODE=$NODE IP=$IP URL=$URL CFG_level=$CFG_level user=$user"`},
		EnvFrom: []corev1.EnvFromSource{
			{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
		},
		Env: []corev1.EnvVar{
			{Name: "PASS", ValueFrom: secret("db", "password", false)},
			{Name: "MODE", ValueFrom: configMap("app", "mode", false)},
			{Name: "OPT", ValueFrom: secret("absent", "x", true)},
			{Name: "OPTKEY", ValueFrom: configMap("app", "absent", true)},
			{Name: "POD", ValueFrom: field("metadata.name")},
			{Name: "NS", ValueFrom: field("metadata.namespace")},
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "IP", ValueFrom: field("status.podIP")},
			{Name: "URL", Value: "$(MODE)://$(user):$(PASS)"},
		}})

	failures := map[string]struct {
		ctr  corev1.Container
		want string
	}{
		"no-secret":    {corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: secret("x", "k", false)}}}, `secret "x" not found`},
		"no-key":       {corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: secret("db", "k", false)}}}, "couldn't find key k in Secret default/db"},
		"no-configmap": {corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: configMap("nocm", "k", false)}}}, `configmap "nocm" not found`},
		"no-cm-key":    {corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: configMap("app", "k", false)}}}, "couldn't find key k in ConfigMap default/app"},
		"no-envfrom": {corev1.Container{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}}, `secret "gone" not found`},
		"no-envfrom-cm": {corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}}, `configmap "gone" not found`},
	}
	for name, f := range failures {
		ctr := f.ctr
		ctr.Name, ctr.Image, ctr.Command = "c", "busybox", []string{"true"} // a run would end Completed
		n.job(t, ctx, "default", name, ctr)
	}

	pod := n.pod(t, ctx, "default", "env", corev1.PodSucceeded, corev1.PodFailed)
	want := fmt.Sprintf("PASS=s3cret MODE=prod OPT=unset OPTKEY=unset POD=%s NS=default NODE=talos-lab IP=%s URL=prod://synapse:s3cret CFG_level=debug user=synapse\n", pod.Name, pod.Status.PodIP)
	if st := pod.Status.ContainerStatuses; pod.Status.Phase != corev1.PodSucceeded || pod.Status.PodIP == "" || len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.Message != want {
		t.Errorf("the pod with env from its sources: %s %+v, want output %q", pod.Status.Phase, pod.Status.ContainerStatuses, want)
	}

	for name, f := range failures {
		pod := n.pod(t, ctx, "default", name, corev1.PodSucceeded, corev1.PodFailed)
		st := pod.Status.ContainerStatuses
		if pod.Status.Phase != corev1.PodFailed || len(st) != 1 || st[0].State.Terminated == nil ||
			st[0].State.Terminated.Reason != "CreateContainerConfigError" || st[0].State.Terminated.Message != f.want {
			t.Errorf("job %s: %s %+v, want CreateContainerConfigError %q", name, pod.Status.Phase, st, f.want)
		}
	}
}
