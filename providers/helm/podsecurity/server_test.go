package podsecurity

// Agreement with the real API server (scripts/kube-up.sh: kube-apiserver
// v1.37.2 with PodSecurity configured as Talos configures it). These tests
// never skip: an unreachable server is a failure telling how to start it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

const labKubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig"

// warnings records the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

// labClient connects to the lab API server or fails the test.
func labClient(t *testing.T) (*kubernetes.Clientset, *warnings) {
	t.Helper()
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		path = labKubeconfig
	}
	hint := "start the lab API server with scripts/kube-up.sh (make test does) and export the KUBECONFIG it prints"
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v\n%s", path, err, hint)
	}
	w := &warnings{}
	cfg.WarningHandler = w
	cfg.Timeout = 15 * time.Second
	cfg.QPS, cfg.Burst = 100, 200 // client-go's default 5 QPS would pace the cases
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v\n%s", cfg.Host, err, hint)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("Kubernetes API server at %s unreachable: %v\n%s", cfg.Host, err, hint)
	}
	t.Logf("API server %s, %s", cfg.Host, v.GitVersion)
	return cs, w
}

func randSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespace creates a namespace with the given PodSecurity labels (deleted
// at the end of the test) and makes sure its default ServiceAccount exists,
// since the ServiceAccount admission plugin rejects pods until it does.
func namespace(t *testing.T, cs *kubernetes.Clientset, prefix string, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	name := "psa-" + prefix + "-" + randSuffix()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: labels,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	_, err = cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create default ServiceAccount in %s: %v", name, err)
	}
	return name
}

// createPod creates pod, retrying briefly while the namespace's default
// ServiceAccount is not visible yet.
func createPod(cs *kubernetes.Clientset, ns string, pod *corev1.Pod) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "serviceaccount") || !strings.Contains(err.Error(), "not found") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serverReasons extracts the check reasons from a PodSecurity rejection:
// `... violates PodSecurity "baseline:latest": hostPath volumes (volume "x"), privileged (...)`.
// Details are in parentheses and may hold commas, so split at depth 0 only.
func serverReasons(t *testing.T, msg, level string) []string {
	t.Helper()
	marker := fmt.Sprintf("violates PodSecurity %q: ", level+":latest")
	i := strings.Index(msg, marker)
	if i < 0 {
		t.Fatalf("rejection %q does not name PodSecurity %s:latest", msg, level)
	}
	list := msg[i+len(marker):]
	var reasons []string
	depth, inQuote, start := 0, false, 0
	add := func(item string) {
		item = strings.TrimSpace(item)
		if j := strings.Index(item, " ("); j >= 0 {
			item = item[:j]
		}
		reasons = append(reasons, item)
	}
	for j := 0; j < len(list); j++ {
		switch c := list[j]; {
		case c == '"' && (j == 0 || list[j-1] != '\\'):
			inQuote = !inQuote
		case inQuote:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			add(list[start:j])
			start = j + 1
		}
	}
	add(list[start:])
	return reasons
}

// TestServerAgrees creates every case's pod template as a bare Pod in a
// namespace enforcing each level, and checks that the real API server
// rejects it exactly when Evaluate reports findings, for the same reasons.
func TestServerAgrees(t *testing.T) {
	cs, _ := labClient(t)
	nsFor := map[string]string{}
	for _, level := range Levels() {
		nsFor[level] = namespace(t, cs, level, map[string]string{"pod-security.kubernetes.io/enforce": level})
	}
	for i, c := range agreementCases {
		for _, level := range Levels() {
			t.Run(c.name+"/"+level, func(t *testing.T) {
				ns := nsFor[level]
				findings, err := Evaluate([]byte(c.manifest), level, ns)
				if err != nil {
					t.Fatal(err)
				}
				if want, ok := c.want[level]; ok && len(want) != len(findings) {
					t.Fatalf("preflight findings %q, table says %q", keys(findings), want)
				}
				ws, err := workloads(mustJSON(t, c.manifest), "", "")
				if err != nil || len(ws) != 1 {
					t.Fatalf("workloads: %v %v", ws, err)
				}
				w := ws[0]
				no := false
				spec := w.podSpec.DeepCopy()
				spec.AutomountServiceAccountToken = &no
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{
						Name:        fmt.Sprintf("case-%d-%s", i, c.name),
						Labels:      w.podMeta.Labels,
						Annotations: w.podMeta.Annotations,
					},
					Spec: *spec,
				}
				err = createPod(cs, ns, pod)
				if err != nil && strings.Contains(err.Error(), "securityContext.privileged: Forbidden: disallowed by cluster policy") {
					t.Fatalf("the lab API server runs without --allow-privileged=true, so no privileged pod (the CI runner) can exist "+
						"in any namespace and PodSecurity is never consulted. Talos runs kube-apiserver with --allow-privileged=true: "+
						"add that flag to kube-apiserver in scripts/kube-up.sh, then restart the lab (scripts/kube-up.sh --down; scripts/kube-up.sh).\n%v", err)
				}
				switch {
				case len(findings) == 0 && err != nil:
					t.Fatalf("preflight passes %s, the API server rejects: %v", level, err)
				case len(findings) > 0 && err == nil:
					t.Fatalf("preflight reports %q at %s, the API server accepted the pod", keys(findings), level)
				case err == nil:
					return
				}
				if !apierrors.IsForbidden(err) {
					t.Fatalf("rejected, but not by admission: %v", err)
				}
				got := serverReasons(t, err.Error(), level)
				var want []string
				for _, f := range findings {
					if !slices.Contains(want, f.Check) {
						want = append(want, f.Check)
					}
					if f.Container != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", f.Container)) {
						t.Errorf("server message does not name container %q: %v", f.Container, err)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("reasons differ:\n server    %q\n preflight %q\n(%v)", got, want, err)
				}
				t.Logf("agree: %v", err)
			})
		}
	}
}

func mustJSON(t *testing.T, manifest string) []byte {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestServerAcceptsViolatingDeployment shows why the preflight runs at plan
// time: the API server ACCEPTS a Deployment whose template violates the
// namespace's enforced level, with only a warning, and the ReplicaSet
// controller then fails to create its pods. PodSecurity admission evaluates
// workload objects at the namespace's warn (and audit) level only, never its
// enforce level, so the warning text depends on the warn label:
//   - a namespace with Talos's defaults (enforce baseline, warn restricted)
//     gets a "restricted" warning, the same kind of warning nearly every
//     chart gets, so the real problem drowns in noise;
//   - a namespace labelled as a kubernetes_namespace step labels it
//     (enforce = warn = audit = baseline) gets a "baseline" warning naming
//     the hostPath volume. Still only a warning.
func TestServerAcceptsViolatingDeployment(t *testing.T) {
	cs, w := labClient(t)
	for _, c := range []struct {
		name   string
		labels map[string]string
		warn   []string
	}{
		{"talos-defaults", nil, []string{`would violate PodSecurity "restricted:latest"`, `restricted volume type "hostPath"`}},
		{"labelled-baseline", map[string]string{
			"pod-security.kubernetes.io/enforce": "baseline",
			"pod-security.kubernetes.io/audit":   "baseline",
			"pod-security.kubernetes.io/warn":    "baseline",
		}, []string{`would violate PodSecurity "baseline:latest": hostPath volumes (volume "media")`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := namespace(t, cs, c.name, c.labels)
			findings, err := Evaluate([]byte(hostPathDeployment), "baseline", ns)
			if err != nil || len(findings) == 0 {
				t.Fatalf("preflight must catch the hostPath: %v %v", findings, err)
			}

			var d appsv1.Deployment
			if err := yaml.Unmarshal([]byte(hostPathDeployment), &d); err != nil {
				t.Fatal(err)
			}
			d.Namespace = ns
			w.take()
			if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), &d, metav1.CreateOptions{}); err != nil {
				t.Fatalf("the API server was expected to ACCEPT the Deployment (warning only), got: %v", err)
			}
			got := w.take()
			t.Logf("accepted; warnings: %q", got)
			for _, want := range c.warn {
				if !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, want) }) {
					t.Errorf("no warning containing %q", want)
				}
			}

			// The controllers: Deployment -> ReplicaSet -> (rejected) Pods.
			deadline := time.Now().Add(45 * time.Second)
			for {
				rss, err := cs.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var failure string
				for _, rs := range rss.Items {
					for _, cond := range rs.Status.Conditions {
						if cond.Type == appsv1.ReplicaSetReplicaFailure && cond.Status == corev1.ConditionTrue {
							failure = cond.Message
						}
					}
				}
				if failure != "" {
					t.Logf("ReplicaSet condition ReplicaFailure: %s", failure)
					if !strings.Contains(failure, `violates PodSecurity "baseline:latest": hostPath volumes`) {
						t.Fatalf("ReplicaSet failure is not the PodSecurity rejection: %s", failure)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no ReplicaSet with a ReplicaFailure condition after 45s (%d ReplicaSets); is kube-controller-manager running (scripts/kube-up.sh)?", len(rss.Items))
				}
				time.Sleep(250 * time.Millisecond)
			}
			pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 0 {
				t.Fatalf("%d pods exist; PodSecurity should have rejected every one", len(pods.Items))
			}
		})
	}
}

var _ rest.WarningHandler = (*warnings)(nil)
