package helm_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
)

// deadAddress is a local address where nothing listens: a port that was
// just free.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// kubeconfigFor writes a kubeconfig whose cluster is at server, context
// "admin@home", and returns its path.
func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: home
  cluster: {server: "%s", insecure-skip-tls-verify: true}
contexts:
- name: admin@home
  context: {cluster: home, user: admin}
current-context: admin@home
users:
- name: admin
  user: {token: not-a-secret}
`, server)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func providerAt(t *testing.T, kubeconfig string) *helm.Provider {
	t.Helper()
	p := helm.New()
	r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "cluster", Config: obj(map[string]cty.Value{"kubeconfig": str(kubeconfig)}), Dir: testdata(t)})
	if err := r.Diagnostics.Err(); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// detail is the one error diagnostic of d.
func detail(t *testing.T, what string, d phases.Diagnostics) phases.Diagnostic {
	t.Helper()
	if len(d) != 1 || d[0].Severity != phases.Error {
		t.Fatalf("%s: want one error, got %v", what, d)
	}
	return d[0]
}

// A cluster where nothing listens: the first step to find it says which
// server, from which kubeconfig and context, and what to check; the steps
// after it say in one line that the cluster did not answer, pointing at
// that step, instead of repeating the trace.
func TestUnreachableCluster(t *testing.T) {
	t.Parallel()
	server := "https://" + deadAddress(t)
	kc := kubeconfigFor(t, server)
	p := providerAt(t, kc)

	first := detail(t, "the first namespace", plan(t, p, helm.Namespace, "media", obj(map[string]cty.Value{})).Diagnostics)
	if first.Summary != "Cannot Reach Kubernetes" {
		t.Errorf("summary %q", first.Summary)
	}
	contains(t, "the first step's error", first.Detail,
		"kubernetes_namespace.media cannot reach the Kubernetes API server at "+server,
		"connection refused",
		`context "admin@home" in the kubeconfig `+kc,
		"Check that the cluster is up", "talos_kubeconfig", "the address is right")

	for _, s := range []struct{ typ, name string }{{helm.Namespace, "files"}, {helm.Namespace, "ci"}, {helm.Release, "app"}} {
		var cfg cty.Value = obj(map[string]cty.Value{})
		if s.typ == helm.Release {
			cfg = obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("media")})
		}
		d := detail(t, s.typ+"."+s.name, plan(t, p, s.typ, s.name, cfg).Diagnostics)
		want := fmt.Sprintf("%s.%s: the cluster at %s did not answer (see kubernetes_namespace.media).", s.typ, s.name, server)
		if d.Summary != "Cannot Reach Kubernetes" || d.Detail != want {
			t.Errorf("%s.%s: %s: %s\nwant %s", s.typ, s.name, d.Summary, d.Detail, want)
		}
	}
	// Read says the same; the first step, asked again (a retry), gets the
	// whole story again.
	r := p.Read(context.Background(), providers.ReadRequest{Type: helm.Namespace, Addr: addr(helm.Namespace, "files"), Config: obj(map[string]cty.Value{})})
	d := detail(t, "read", r.Diagnostics)
	if !strings.Contains(d.Detail, "(see kubernetes_namespace.media)") {
		t.Errorf("read of another step: %s", d.Detail)
	}
	again := detail(t, "the first step again", plan(t, p, helm.Namespace, "media", obj(map[string]cty.Value{})).Diagnostics)
	if again.Detail != first.Detail {
		t.Errorf("the first step, again:\n%s\nwant\n%s", again.Detail, first.Detail)
	}
}

// A server that stops listening between the probe and the call: the
// call's connection error is told as the probe's would be.
func TestClusterLostMidCall(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	server := srv.URL
	p := providerAt(t, kubeconfigFor(t, server))
	// The probe answers; the call fails, though not to connect.
	d := detail(t, "a server that refuses", plan(t, p, helm.Namespace, "media", obj(map[string]cty.Value{})).Diagnostics)
	if d.Summary != "Cannot Read Namespace" {
		t.Errorf("a server that refuses: %s: %s", d.Summary, d.Detail)
	}
	// Gone now: the next step, spared the probe, fails to connect.
	srv.Close()
	d = detail(t, "a server gone", plan(t, p, helm.Namespace, "files", obj(map[string]cty.Value{})).Diagnostics)
	contains(t, "a server gone", d.Detail, "kubernetes_namespace.files cannot reach the Kubernetes API server at "+server, "connection refused", "Check that the cluster is up")
	if strings.Contains(d.Detail, "/api/v1/namespaces") {
		t.Errorf("the error keeps the client's request line: %s", d.Detail)
	}
}
