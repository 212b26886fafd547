package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// defaultKubeconfig is where scripts/kube-up.sh writes the admin kubeconfig.
const defaultKubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig"

// kube is the real API server the tests run against.
type kube struct {
	path   string
	client kubernetes.Interface
}

// lab returns the API server started by scripts/kube-up.sh; the test FAILS
// (never skips) when it cannot be reached.
func lab(t testing.TB) *kube {
	t.Helper()
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		path = defaultKubeconfig
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("no Kubernetes API server: %v.\nStart one with scripts/kube-up.sh (make test does) and set KUBECONFIG=%s.", err, defaultKubeconfig)
	}
	rc.Timeout = 10 * time.Second
	rc.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(rc)
	if err == nil {
		_, err = cs.Discovery().ServerVersion()
	}
	if err != nil {
		t.Fatalf("the Kubernetes API server of %s cannot be reached: %v.\nStart it with scripts/kube-up.sh (make test does).", path, err)
	}
	return &kube{path: path, client: cs}
}

// namespace returns a unique namespace name, deleted when the test ends.
func (k *kube) namespace(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("t-%s-%06d", prefix, rand.IntN(1000000))
	t.Cleanup(func() {
		err := k.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup of namespace %s: %v", name, err)
		}
	})
	return name
}

// provider is a configured helm provider for the lab.
func (k *kube) provider(t testing.TB, extra map[string]cty.Value) *helm.Provider {
	t.Helper()
	p := helm.New()
	attrs := map[string]cty.Value{"kubeconfig": cty.StringVal(k.path)}
	for n, v := range extra {
		attrs[n] = v
	}
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "test", Config: cty.ObjectVal(attrs), Dir: testdata(t)})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func testdata(t testing.TB) string {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// helmConfig is an action.Configuration as the helm CLI would build it, to
// check release records from outside the provider.
func (k *kube) helmConfig(t testing.TB, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &k.path
	flags.Namespace = &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// history is helm history: "1:superseded 2:deployed".
func (k *kube) history(t testing.TB, ns, name string) string {
	t.Helper()
	h := action.NewHistory(k.helmConfig(t, ns))
	h.Max = 100
	rels, err := h.Run(name)
	if err != nil {
		return "error: " + err.Error()
	}
	var parts []string
	for _, r := range rels {
		parts = append(parts, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
	}
	return strings.Join(parts, " ")
}

// list is helm list in a namespace (all states): names with status.
func (k *kube) list(t testing.TB, ns string) []string {
	t.Helper()
	l := action.NewList(k.helmConfig(t, ns))
	l.All = true
	l.SetStateMask()
	rels, err := l.Run()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rels {
		out = append(out, fmt.Sprintf("%s:%d:%s", r.Name, r.Version, r.Info.Status))
	}
	return out
}

// setStatus rewrites a release record's status through the storage
// driver, as a client that died mid-operation leaves it.
func (k *kube) setStatus(t testing.TB, ns, name string, version int, st release.Status) {
	t.Helper()
	cfg := k.helmConfig(t, ns)
	last, err := cfg.Releases.Get(name, version)
	if err != nil {
		t.Fatal(err)
	}
	last.Info.Status = st
	if err := cfg.Releases.Update(last); err != nil {
		t.Fatal(err)
	}
}

func obj(attrs map[string]cty.Value) cty.Value { return cty.ObjectVal(attrs) }
func str(s string) cty.Value                   { return cty.StringVal(s) }

func strMap(m map[string]string) cty.Value {
	vals := map[string]cty.Value{}
	for k, v := range m {
		vals[k] = cty.StringVal(v)
	}
	return cty.MapVal(vals)
}

func addr(typ, name string) phases.Address { return phases.Address{Type: typ, Name: name} }

func plan(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value) providers.PlanResponse {
	t.Helper()
	return p.Plan(context.Background(), providers.PlanRequest{Type: typ, Addr: addr(typ, name), Config: cfg, Action: providers.Create})
}

func mustPlan(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value) providers.PlanResponse {
	t.Helper()
	r := plan(t, p, typ, name, cfg)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Plan %s.%s: %v", typ, name, err)
	}
	return r
}

func apply(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value, prior *providers.Prior, log *bytes.Buffer) providers.ApplyResponse {
	t.Helper()
	if log == nil {
		log = &bytes.Buffer{}
	}
	return p.Apply(context.Background(), providers.ApplyRequest{Type: typ, Addr: addr(typ, name), Config: cfg, Prior: prior, Log: log})
}

func mustApply(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value, prior *providers.Prior) providers.ApplyResponse {
	t.Helper()
	var log bytes.Buffer
	r := apply(t, p, typ, name, cfg, prior, &log)
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Apply %s.%s: %v\nlog:\n%s", typ, name, err, log.String())
	}
	return r
}

func priorOf(r providers.ApplyResponse) *providers.Prior {
	return &providers.Prior{Outputs: r.Outputs, Private: r.Private, Revert: r.Revert}
}

func read(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value, prior *providers.Prior) providers.ReadResponse {
	t.Helper()
	r := p.Read(context.Background(), providers.ReadRequest{Type: typ, Addr: addr(typ, name), Config: cfg, Prior: prior})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Read %s.%s: %v", typ, name, err)
	}
	return r
}

func revert(t testing.TB, p providers.Interface, typ, name string, cfg cty.Value, inv *providers.RevertData) {
	t.Helper()
	if inv == nil {
		t.Fatalf("%s.%s: no revert data to revert", typ, name)
	}
	var log bytes.Buffer
	r := p.(providers.Reverter).Revert(context.Background(), providers.RevertRequest{Type: typ, Addr: addr(typ, name), Config: cfg, Revert: *inv, Log: &log})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Revert %s.%s: %v\nlog:\n%s", typ, name, err, log.String())
	}
}

func contains(t testing.TB, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, text)
		}
	}
}

func readFile(p string) ([]byte, error)  { return os.ReadFile(p) }
func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }
func time_After(ms int) <-chan time.Time { return time.After(time.Duration(ms) * time.Millisecond) }
