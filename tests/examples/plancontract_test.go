package examples

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/homelab-migrate/migrate/providers/helm/ocitest"
	"github.com/homelab-migrate/migrate/secret/agefile"
)

// contractRunbook makes the namespace first, then a release of CHART
// (a local directory or a repository URL) with an age-encrypted values
// file: run --plan must refuse a changed chart or values file before the
// namespace is made.
const contractRunbook = `
variable "kubeconfig" { type = string }
variable "ns" { type = string }
variable "chart" { type = string }

provider "helm" "cluster" {
  kubeconfig = var.kubeconfig
}

phase "apps" {
  step "kubernetes_namespace" "web" {
    name         = var.ns
    pod_security = "baseline"
  }

  step "helm_release" "web" {
    chart        = var.chart
    namespace    = var.ns
    values       = { image = "busybox:1.36", gpu = false }
    values_files = ["port.yaml.age"]
    depends_on   = [kubernetes_namespace.web]
  }
}
`

// contractCase is a runbook directory for contractRunbook, and what
// migrate is run with.
type contractCase struct {
	dir  string
	args []string
	env  []string
	seal func(name, clear string)
}

func newContractCase(t *testing.T, chart string) *contractCase {
	t.Helper()
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig" // where scripts/kube-up.sh writes it
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("no kubeconfig (%v): start the API server with scripts/kube-up.sh (make test does)", err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	c := &contractCase{dir: t.TempDir()}
	copyTracked(t, "../../examples/homelab/charts", filepath.Join(c.dir, "charts"))
	c.seal = func(name, clear string) {
		b, err := agefile.Encrypt([]byte(clear), true, id.Recipient())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.seal("port.yaml.age", "port: 8080\n")
	keyFile := filepath.Join(t.TempDir(), "key.txt")
	if err := os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "main.hcl"), []byte(contractRunbook), 0o644); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns := "mt-contract-" + hex.EncodeToString(b)
	c.args = []string{"--age-identity", keyFile, "--var", "kubeconfig=" + kubeconfig, "--var", "ns=" + ns, "--var", "chart=" + chart}
	// Helm's repository cache and configuration stay in the test's
	// directories.
	home := t.TempDir()
	c.env = []string{"MIGRATE_AGE_IDENTITY=", "HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"), "HELM_DATA_HOME=" + filepath.Join(home, "data")}
	return c
}

// plan saves a plan and returns its path.
func (c *contractCase) plan(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.json")
	run(t, c.dir, c.env, append([]string{"plan", "--out", path}, c.args...)...)
	return path
}

// refused runs the saved plan, which must be refused with every one of
// wants said, and nothing run: no state was even made.
func (c *contractCase) refused(t *testing.T, plan string, wants ...string) {
	t.Helper()
	cmd := exec.Command(migrate, append([]string{"run", "--plan", plan, "--auto-approve", "--runbook", c.dir, "--no-color"}, c.args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("run --plan was not refused:\n%s", out)
	}
	for _, want := range wants {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, ".migrate")); err == nil {
		t.Errorf("the refused run made a state: a step may have run\n%s", out)
	}
}

func TestSavedPlanRefusesEditedChartTemplate(t *testing.T) {
	t.Parallel()
	c := newContractCase(t, "charts/app")
	plan := c.plan(t)
	tmpl := filepath.Join(c.dir, "charts", "app", "templates", "service.yaml")
	b, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmpl, append(b, "\n# nobody reviewed this line\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	c.refused(t, plan, "helm_release.web: a file it reads changed since the plan was made", "nothing was run: make a new plan")
}

func TestSavedPlanRefusesEditedAgeValues(t *testing.T) {
	t.Parallel()
	c := newContractCase(t, "charts/app")
	plan := c.plan(t)
	c.seal("port.yaml.age", "port: 8081\n")
	c.refused(t, plan, "helm_release.web: a file it reads changed since the plan was made")
}

// A chart from a repository, its version not pinned: the plan records the
// version it resolved to, and a run after the repository published
// another is refused, naming both.
func TestSavedPlanRefusesChartResolvedAnew(t *testing.T) {
	t.Parallel()
	repo := newChartRepo(t, "../../examples/homelab/charts/app")
	repo.publish(t, "0.2.0")
	c := newContractCase(t, repo.srv.URL+"/app")
	plan := c.plan(t)
	saved, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(saved), "resolved to app-0.2.0") {
		t.Errorf("the saved plan does not record the version the chart resolved to:\n%s", saved)
	}
	repo.publish(t, "0.3.0")
	c.refused(t, plan, "helm_release.web: chart "+repo.srv.URL+"/app resolved to app-0.2.0", "but chart "+repo.srv.URL+"/app resolved to app-0.3.0")
}

// chartRepo is a Helm chart repository over HTTP: an index.yaml and the
// archives of the versions published, newest last.
type chartRepo struct {
	srv   *httptest.Server
	chart string // the chart directory each version is made from
	mu    sync.Mutex
	files map[string][]byte
	index bytes.Buffer
}

func newChartRepo(t *testing.T, chart string) *chartRepo {
	r := &chartRepo{chart: chart, files: map[string][]byte{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		name := strings.TrimPrefix(req.URL.Path, "/")
		if name == "index.yaml" {
			w.Write(r.index.Bytes())
			return
		}
		b, ok := r.files[name]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// publish adds the chart at version to the repository.
func (r *chartRepo) publish(t *testing.T, version string) {
	t.Helper()
	ch, err := loader.Load(r.chart)
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
	r.mu.Lock()
	defer r.mu.Unlock()
	name := filepath.Base(out)
	r.files[name] = b
	if r.index.Len() == 0 {
		r.index.WriteString("apiVersion: v1\nentries:\n  app:\n")
	}
	sum := sha256.Sum256(b)
	fmt.Fprintf(&r.index, "  - apiVersion: v2\n    name: app\n    version: %s\n    digest: %x\n    urls: [%s/%s]\n", version, sum, r.srv.URL, name)
}

// An OCI chart from a real registry (Debian's docker-registry, started by
// the test): its version not pinned, the plan records the digest it
// resolved to; pushed again under the same version, a run of the saved
// plan is refused naming both digests, and nothing runs. Planned again,
// it installs from the registry, and rolls back.
func TestSavedPlanRefusesMovedOCITag(t *testing.T) {
	t.Parallel()
	reg := ocitest.Start(t, ocitest.Options{})
	const app = "../../examples/homelab/charts/app"
	first := reg.Push(t, app, "charts/app", nil)
	c := newContractCase(t, reg.Ref("charts/app"))
	plan := c.plan(t)
	second := reg.Push(t, app, "charts/app", func(ch *chart.Chart) { ch.Metadata.Description = "pushed again under the same version" })
	c.refused(t, plan, "helm_release.web: chart "+reg.Ref("charts/app")+" resolved to app-0.2.0, digest "+first+" when the plan was made",
		"resolved to app-0.2.0, digest "+second+" now")

	plan = c.plan(t)
	out := run(t, c.dir, c.env, append([]string{"run", "--plan", plan, "--auto-approve"}, c.args...)...)
	if !strings.Contains(out, "(chart app-0.2.0 from "+reg.Ref("charts/app")+", digest "+second+")") {
		t.Errorf("the run does not say the digest it installed:\n%s", out)
	}
	run(t, c.dir, c.env, append([]string{"rollback", "--auto-approve"}, c.args...)...)
}
