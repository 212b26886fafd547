package helm_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/helm"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// TestReleaseDigest: a release's input digest changes with a chart
// template and with an age-encrypted values file, and no cluster is
// needed to take it.
func TestReleaseDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyDir(t, filepath.Join(testdata(t), "charts", "app"), filepath.Join(dir, "charts", "app"))
	seal := func(clear string) {
		b, err := agefile.Encrypt([]byte(clear), true, canaryIdentity.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "v.yaml.age"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	seal("message: one\n")
	p := configured(t, dir)
	rel := obj(map[string]cty.Value{"chart": str("charts/app"), "namespace": str("web"),
		"values_files": cty.ListVal([]cty.Value{str("v.yaml.age")})})
	first := digestOf(t, p, rel)
	tmpl := filepath.Join(dir, "charts", "app", "templates", "all.yaml")
	b, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmpl, append(b, "\n# edited\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	second := digestOf(t, p, rel)
	if second.Digest == first.Digest {
		t.Error("an edited template leaves the release's digest as it was")
	}
	seal("message: two\n")
	if third := digestOf(t, p, rel); third.Digest == second.Digest {
		t.Error("an edited age values file leaves the release's digest as it was")
	}
	if first.Resolved != "" {
		t.Errorf("a local chart says it resolved something: %q", first.Resolved)
	}
}

// TestRemoteChartResolved: a remote chart without a pinned version is
// digested as the version its repository serves now, and says which.
// (Not parallel: Helm's cache goes where the environment says.)
func TestRemoteChartResolved(t *testing.T) {
	t.Setenv("HELM_CACHE_HOME", t.TempDir())
	t.Setenv("HELM_CONFIG_HOME", t.TempDir())
	t.Setenv("HELM_DATA_HOME", t.TempDir())
	repo := serveCharts(t, filepath.Join(testdata(t), "charts", "app"))
	repo.publish(t, "1.0.0")
	p := configured(t, t.TempDir())
	rel := obj(map[string]cty.Value{"chart": str(repo.URL + "/app"), "namespace": str("web")})
	first := digestOf(t, p, rel)
	if !strings.Contains(first.Resolved, "resolved to app-1.0.0") {
		t.Errorf("resolved: %q", first.Resolved)
	}
	repo.publish(t, "1.1.0")
	second := digestOf(t, p, rel)
	if second.Digest == first.Digest || !strings.Contains(second.Resolved, "resolved to app-1.1.0") {
		t.Errorf("a new version published: digest %s then %s, resolved %q", first.Digest, second.Digest, second.Resolved)
	}
}

// TestRepoChartDigestPinned: a repository chart's digest attribute is its
// archive's, as index.yaml lists it; another is refused naming both.
// (Not parallel: Helm's cache goes where the environment says.)
func TestRepoChartDigestPinned(t *testing.T) {
	t.Setenv("HELM_CACHE_HOME", t.TempDir())
	t.Setenv("HELM_CONFIG_HOME", t.TempDir())
	t.Setenv("HELM_DATA_HOME", t.TempDir())
	repo := serveCharts(t, filepath.Join(testdata(t), "charts", "app"))
	sum := repo.publish(t, "1.0.0")
	p := configured(t, t.TempDir())
	pinned := func(digest string) cty.Value {
		return obj(map[string]cty.Value{"chart": str(repo.URL + "/app"), "version": str("1.0.0"), "namespace": str("web"), "digest": str(digest)})
	}
	contains(t, "resolved", digestOf(t, p, pinned("sha256:"+sum)).Resolved, "digest sha256:"+sum)
	other := "sha256:" + strings.Repeat("0", 64)
	r := p.InputDigest(context.Background(), providers.DigestRequest{Type: helm.Release, Addr: addr(helm.Release, "app"), Config: pinned(other)})
	if err := r.Diagnostics.Err(); err == nil {
		t.Error("a repository chart of another digest than the pinned one was digested")
	} else {
		contains(t, "the refusal", err.Error(), "Chart Digest Mismatch", "resolves to sha256:"+sum+" now, but the step pins digest "+other)
	}
}

func configured(t *testing.T, dir string) *helm.Provider {
	t.Helper()
	p := helm.New()
	attrs := map[string]cty.Value{"kubeconfig": str(filepath.Join(t.TempDir(), "kubeconfig"))}
	if r := p.Configure(context.Background(), providers.ConfigureRequest{Name: "x", Config: obj(attrs), Dir: dir}); r.Diagnostics.HasErrors() {
		t.Fatal(r.Diagnostics.Err())
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func digestOf(t *testing.T, p *helm.Provider, cfg cty.Value) providers.DigestResponse {
	t.Helper()
	r := p.InputDigest(context.Background(), providers.DigestRequest{Type: helm.Release, Addr: addr(helm.Release, "app"), Config: cfg})
	if r.Diagnostics.HasErrors() || r.Digest == "" {
		t.Fatalf("digest %q: %v", r.Digest, r.Diagnostics.Err())
	}
	return r
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// chartServer is a Helm chart repository over HTTP serving the versions
// of one chart published so far.
type chartServer struct {
	*httptest.Server
	chart string
	mu    sync.Mutex
	files map[string][]byte
	index strings.Builder
}

func serveCharts(t *testing.T, chart string) *chartServer {
	s := &chartServer{chart: chart, files: map[string][]byte{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "index.yaml" {
			fmt.Fprint(w, s.index.String())
			return
		}
		if b, ok := s.files[name]; ok {
			w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish adds the chart at version and returns its archive's hex sha256.
func (s *chartServer) publish(t *testing.T, version string) string {
	t.Helper()
	ch, err := loader.Load(s.chart)
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version = version
	out, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[filepath.Base(out)] = b
	if s.index.Len() == 0 {
		s.index.WriteString("apiVersion: v1\nentries:\n  app:\n")
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(b))
	fmt.Fprintf(&s.index, "  - apiVersion: v2\n    name: app\n    version: %s\n    digest: %s\n    urls: [%s/%s]\n", version, sum, s.URL, filepath.Base(out))
	return sum
}
