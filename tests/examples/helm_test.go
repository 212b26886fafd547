package examples

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helmRunbook installs the homelab example's chart into a namespace of its
// own through the helm provider, which runs as migrate-provider-helm.
const helmRunbook = `
variable "kubeconfig" { type = string }
variable "ns" { type = string }
variable "gpu" {
  type    = bool
  default = false
}

provider "helm" "cluster" {
  kubeconfig = var.kubeconfig
}

phase "apps" {
  step "kubernetes_namespace" "web" {
    name         = var.ns
    pod_security = "baseline"
  }

  step "helm_release" "web" {
    chart      = "charts/app"
    namespace  = var.ns
    values     = { image = "busybox:1.36", port = 8080, gpu = var.gpu }
    depends_on = [kubernetes_namespace.web]
  }
}
`

// TestHelmThroughThePlugin drives the helm provider program against the
// real API server of scripts/kube-up.sh: plan, run, a plan that sees the
// release (Read crosses the pipe), rollback, and a PodSecurity finding
// that comes back as a plan error.
func TestHelmThroughThePlugin(t *testing.T) {
	t.Parallel()
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = "/var/lib/migrate-lab/kube/admin.kubeconfig" // where scripts/kube-up.sh writes it
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("no kubeconfig (%v): start the API server with scripts/kube-up.sh (make test does)", err)
	}
	dir := t.TempDir()
	copyTracked(t, "../../examples/homelab/charts", filepath.Join(dir, "charts"))
	if err := os.WriteFile(filepath.Join(dir, "main.hcl"), []byte(helmRunbook), 0o644); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	ns := "mt-plugin-" + hex.EncodeToString(b)
	vars := []string{"--var", "kubeconfig=" + kubeconfig, "--var", "ns=" + ns}

	out := run(t, dir, nil, append([]string{"plan"}, vars...)...)
	for _, want := range []string{"helm_release.web", "Deployment", "pod-security.kubernetes.io/enforce"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	run(t, dir, nil, append([]string{"run", "--all", "--auto-approve"}, vars...)...)
	// --detailed-exitcode: a plan with changes would exit 2 and fail run.
	if out := run(t, dir, nil, append([]string{"plan", "--detailed-exitcode"}, vars...)...); !strings.Contains(out, "0 to create, 0 to update, 0 drifted, 2 unchanged") {
		t.Errorf("a plan after the run:\n%s", out)
	}
	run(t, dir, nil, append([]string{"rollback", "--auto-approve"}, vars...)...)
	if out := run(t, dir, nil, append([]string{"plan"}, vars...)...); !strings.Contains(out, "2 to create") {
		t.Errorf("a plan after the rollback:\n%s", out)
	}

	// /dev/dri in a baseline namespace: the preflight's finding is a plan
	// error, with its fix, coming back through the pipe.
	cmd := exec.Command(migrate, append([]string{"plan", "--runbook", dir, "--no-color", "--var", "gpu=true"}, vars...)...)
	res, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(res), "hostPath") {
		t.Fatalf("a /dev/dri release in a baseline namespace planned (%v):\n%s", err, res)
	}
}
