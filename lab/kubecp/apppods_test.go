package kubecp_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// deploy creates a Deployment of one pod labelled app=name in ns.
func (n *node) deploy(t *testing.T, ctx context.Context, ns, name string, spec corev1.PodSpec) {
	t.Helper()

	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := n.k.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// appPod waits until the pod of Deployment name satisfies cond.
func (n *node) appPod(t *testing.T, ctx context.Context, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()

	var last *corev1.Pod

	for {
		pods, err := n.k.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err == nil && len(pods.Items) == 1 {
			last = &pods.Items[0]
			if cond(last) {
				return last
			}
		}

		select {
		case <-ctx.Done():
			if last != nil {
				t.Fatalf("the pod of %s never %s; last seen: phase %s, containers %+v", name, what, last.Status.Phase, last.Status.ContainerStatuses)
			}

			t.Fatalf("the pod of %s never %s: no pod", name, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func privilegedNS(t *testing.T, ctx context.Context, n *node, name string) {
	t.Helper()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
	if _, err := n.k.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitSA(t, ctx, n.k, name)
}

func hostDir(path string) corev1.VolumeSource {
	return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAppPods: the node runs the pods of Deployments as kubelet does:
// Ready only once the readinessProbe passes, reached through a NodePort;
// a container that exits restarts with back-off (CrashLoopBackOff), its
// previous run's log kept; an image with no stand-in cannot be pulled.
func TestAppPods(t *testing.T) {
	t.Parallel()

	n := startNode(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	privilegedNS(t, ctx, n, "media")

	t.Run("ReadyAfterProbe", func(t *testing.T) {
		// the probe passes once the program wrote /tmp/ready, 3s in
		n.deploy(t, ctx, "media", "slow", corev1.PodSpec{Containers: []corev1.Container{{
			Name: "slow", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 3; touch /tmp/ready; exec sleep 600"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", "/tmp/ready"}}}, PeriodSeconds: 1},
		}}})

		running := n.appPod(t, ctx, "media", "slow", "Running", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
		if ready(running) {
			t.Fatalf("Ready before its probe passed: %+v", running.Status)
		}

		start := running.Status.ContainerStatuses[0].State.Running.StartedAt.Time
		p := n.appPod(t, ctx, "media", "slow", "Ready", ready)

		if took := time.Since(start); took < 3*time.Second {
			t.Fatalf("Ready %s after the start, before the program was", took)
		}

		if p.Status.PodIP == "" || !strings.HasPrefix(p.Status.PodIP, "127.153.5.") {
			t.Fatalf("pod address %q, want 127.153.5.N (node 127.25.1.5)", p.Status.PodIP)
		}
	})

	t.Run("JellyfinThroughNodePort", func(t *testing.T) {
		writeFile(t, filepath.Join(n.host, "jellyfin", "config", "system.xml"), "<ServerConfiguration>\n  <PreviousVersionStr>10.10.3</PreviousVersionStr>\n</ServerConfiguration>\n")

		created := time.Now()
		n.deploy(t, ctx, "media", "jellyfin", corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "jellyfin", Image: "jellyfin/jellyfin:10.10.7",
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8096}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: hostDir("/jellyfin")}},
		})

		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "jellyfin"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "jellyfin"},
			Ports: []corev1.ServicePort{{Port: 8096, TargetPort: intstr.FromString("http"), NodePort: 30096}},
		}}
		if _, err := n.k.CoreV1().Services("media").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		n.appPod(t, ctx, "media", "jellyfin", "Ready", ready)
		t.Logf("Jellyfin's pod Ready %s after its Deployment was created", time.Since(created).Round(time.Millisecond))

		body := ""

		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if resp, err := http.Get("http://" + n.addr + ":30096/health"); err == nil { //nolint:noctx
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()

				if body = string(b); body == "Healthy" {
					break
				}
			}

			if time.Now().After(deadline) {
				t.Fatalf("http://%s:30096/health never answered Healthy (last %q)", n.addr, body)
			}
		}

		if b, _ := os.ReadFile(filepath.Join(n.host, "jellyfin", "config", "system.xml")); !strings.Contains(string(b), ">10.10.7<") {
			t.Fatalf("system.xml after the start:\n%s", b)
		}
	})

	t.Run("SynapseOnPostgresByServiceName", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("postgres runs as the image's uid 999: the sandbox maps it only when the lab runs as root")
		}
		if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err != nil {
			t.Skip("Debian's postgresql-15 is not installed (scripts/postgres-install.sh)")
		}
		// the image's own entrypoint and command: no command given
		n.deploy(t, ctx, "media", "pg", corev1.PodSpec{Containers: []corev1.Container{{
			Name: "postgres", Image: "postgres:15-bookworm",
			Env: []corev1.EnvVar{{Name: "POSTGRES_USER", Value: "synapse"}, {Name: "POSTGRES_PASSWORD", Value: "pw"},
				{Name: "POSTGRES_INITDB_ARGS", Value: "--encoding=UTF8 --lc-collate=C --lc-ctype=C"}, {Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"pg_isready", "-U", "synapse"}}}, PeriodSeconds: 1},
		}}, Volumes: []corev1.Volume{{Name: "data", VolumeSource: hostDir("/pg")}}})
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "synapse-postgres"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "pg"}, Ports: []corev1.ServicePort{{Port: 5432}}}}
		if _, err := n.k.CoreV1().Services("media").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.appPod(t, ctx, "media", "pg", "Ready", ready)

		writeFile(t, filepath.Join(n.host, "synapse", "homeserver.yaml"), "server_name: matrix.example.org\nreport_stats: false\n"+
			"database:\n  name: psycopg2\n  args:\n    user: synapse\n    password: pw\n    dbname: synapse\n    host: synapse-postgres\n")
		n.deploy(t, ctx, "media", "synapse", corev1.PodSpec{Containers: []corev1.Container{{
			Name: "synapse", Image: "matrixdotorg/synapse:v1.120.2",
			Env:            []corev1.EnvVar{{Name: "SYNAPSE_CONFIG_PATH", Value: "/config/homeserver.yaml"}},
			Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8008}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("http")}}},
		}}, Volumes: []corev1.Volume{{Name: "config", VolumeSource: hostDir("/synapse")}}})
		n.appPod(t, ctx, "media", "synapse", "Ready", ready)
	})

	t.Run("CrashLoop", func(t *testing.T) {
		// settings a newer Jellyfin ran with: the older image refuses them
		writeFile(t, filepath.Join(n.host, "newer", "config", "system.xml"), "<ServerConfiguration>\n  <PreviousVersionStr>10.10.7</PreviousVersionStr>\n</ServerConfiguration>\n")

		n.deploy(t, ctx, "media", "downgraded", corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "jellyfin", Image: "jellyfin/jellyfin:10.10.3",
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: hostDir("/newer")}},
		})

		p := n.appPod(t, ctx, "media", "downgraded", "in CrashLoopBackOff after a restart", func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 {
				return false
			}

			st := p.Status.ContainerStatuses[0]

			return st.RestartCount >= 1 && st.State.Waiting != nil && st.State.Waiting.Reason == "CrashLoopBackOff"
		})

		st := p.Status.ContainerStatuses[0]
		if last := st.LastTerminationState.Terminated; last == nil || last.ExitCode != 1 || last.Reason != "Error" || ready(p) {
			t.Fatalf("lastState %+v, ready %v", st.LastTerminationState, ready(p))
		}

		// as a person looks: kubectl logs --previous
		out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", n.cp.Kubeconfig(), "-n", "media", "logs", "--previous", p.Name).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "older than the one that last ran with this configuration (10.10.7") {
			t.Fatalf("kubectl logs --previous: %v\n%s", err, out)
		}
	})

	t.Run("LivenessRestarts", func(t *testing.T) {
		// alive while /tmp/alive exists: the program removes it 2s in
		n.deploy(t, ctx, "media", "hangs", corev1.PodSpec{Containers: []corev1.Container{{
			Name: "hangs", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo run; touch /tmp/alive; sleep 2; rm /tmp/alive; exec sleep 600"},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", "/tmp/alive"}}},
				PeriodSeconds: 1, FailureThreshold: 2},
		}}})

		p := n.appPod(t, ctx, "media", "hangs", "restarted by its liveness probe", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})

		if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
			t.Fatalf("killed by its liveness probe: lastState %+v", p.Status.ContainerStatuses[0].LastTerminationState)
		}
	})

	t.Run("UnknownImage", func(t *testing.T) {
		n.deploy(t, ctx, "media", "unknown", corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/nothing:1.0"}}})

		p := n.appPod(t, ctx, "media", "unknown", "waiting to pull", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImagePull"
		})

		if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "no stand-in for this image") || p.Status.Phase != corev1.PodPending {
			t.Fatalf("phase %s, message %q", p.Status.Phase, msg)
		}
	})
}
